"""HeardReplyTrimmer and trim_to_heard: a cut reply's context message holds what was heard."""

import asyncio
import json

import pytest
from pipecat.frames.frames import (
    InterruptionFrame,
    TTSAudioRawFrame,
    TTSStartedFrame,
    TTSTextFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair
from pipecat.tests.utils import SleepFrame, run_test
from pipecat.utils.text.base_text_aggregator import TextType

from ontime_pipecat import (
    HeardReplyTrimmer,
    OntimeBargeInFrame,
    OntimeFrameSerializer,
    SpokenText,
    trim_to_heard,
)

REPLY = "Your order shipped on Monday, and it should arrive by Thursday."
# Its 11 words, one every 300 ms, as a word-timestamp TTS releases them.
WORDS = [SpokenText(w, 300.0 * i) for i, w in enumerate(REPLY.split())]


@pytest.mark.parametrize(
    "heard_ms,expected",
    [
        (1, "Your…"),
        (300, "Your…"),  # "order" starts at 300: not begun before 300
        (301, "Your order…"),
        (1000, "Your order shipped on…"),
        (1201, "Your order shipped on Monday,…"),
        (3000, "Your order shipped on Monday, and it should arrive by…"),
        (3001, None),  # past the last word's start (3000): all heard
    ],
)
def test_word_timestamps_keep_the_words_begun_before_heard_ms(heard_ms, expected):
    assert trim_to_heard(REPLY, heard_ms, WORDS, audio_ms=3300.0) == expected


def test_sentences_are_shared_out_by_characters_within_their_audio():
    # Two sentences, released at 0 and 2000 ms; 3000 ms of audio in all.
    spoken = [SpokenText("One two three four.", 0.0), SpokenText("Five six.", 2000.0)]
    content = "One two three four. Five six."
    # "four." begins at character 14 of 19: 14/19 of 2000 ms = 1473.7 ms.
    assert trim_to_heard(content, 1473, spoken, 3000.0) == "One two three…"
    assert trim_to_heard(content, 1474, spoken, 3000.0) == "One two three four.…"
    # "six." begins at character 5 of 9 of the second: 2000 + 5/9 of 1000 ms = 2555.6 ms.
    assert trim_to_heard(content, 2556, spoken, 3000.0) is None


def test_without_matching_parts_the_whole_reply_is_shared_out_over_its_audio():
    content = "one two three four"  # 18 characters over 1800 ms: 100 ms a character
    assert trim_to_heard(content, 500, [], 1800.0) == "one two…"  # "two" begins at 400
    assert trim_to_heard(content, 400, [], 1800.0) == "one…"
    assert trim_to_heard(content, 1401, [], 1800.0) is None  # "four" begins at 1400
    # Parts whose words differ from the message (another word count) are not used.
    assert trim_to_heard(content, 500, [SpokenText("one", 0.0)], 1800.0) == "one two…"


def test_nothing_heard_is_an_empty_message_and_no_audio_is_no_answer():
    assert trim_to_heard(REPLY, 0, WORDS, 3300.0) == ""
    assert trim_to_heard("one two", 500, [], 0.0) is None


def test_the_cut_marker_is_configurable():
    assert trim_to_heard(REPLY, 301, WORDS, 3300.0, cut_marker="") == "Your order"


# The trimmer in a pipeline, in front of a real assistant aggregator.

RATE = 24000
CHUNK = TTSAudioRawFrame(audio=b"\x00\x00" * (RATE // 50), sample_rate=RATE, num_channels=1)


def _reply_frames(words: list[str], every_chunks: int) -> list:
    """TTSStartedFrame, then each word followed by `every_chunks` 20 ms audio chunks."""
    frames: list = [TTSStartedFrame(context_id="r")]
    for w in words:
        frames.append(TTSTextFrame(w, text_type=TextType.WORD, context_id="r"))
        frames += [
            TTSAudioRawFrame(audio=CHUNK.audio, sample_rate=RATE, num_channels=1)
            for _ in range(every_chunks)
        ]
    return frames


async def _run(interruption, *, enabled: bool = True, earlier: list | None = None):
    context = LLMContext(messages=earlier or [{"role": "user", "content": "Where is my order?"}])
    pair = LLMContextAggregatorPair(context)
    trimmer = HeardReplyTrimmer(pair.assistant(), enabled=enabled)
    frames = _reply_frames(["one", "two", "three", "four", "five"], every_chunks=10)  # 200 ms
    frames += [SleepFrame(0.2), interruption, SleepFrame(0.2)]
    await run_test(Pipeline([trimmer, pair.assistant()]), frames_to_send=frames)
    return context.get_messages()


def test_a_barge_in_with_heard_ms_cuts_the_context_message():
    messages = asyncio.run(_run(OntimeBargeInFrame(heard_ms=450, last_mark=None)))
    assert messages == [
        {"role": "user", "content": "Where is my order?"},
        {"role": "assistant", "content": "one two three…"},
    ]


def test_heard_ms_zero_removes_the_message():
    messages = asyncio.run(_run(OntimeBargeInFrame(heard_ms=0)))
    assert messages == [{"role": "user", "content": "Where is my order?"}]


@pytest.mark.parametrize(
    "interruption",
    [OntimeBargeInFrame(heard_ms=None), InterruptionFrame(), OntimeBargeInFrame(heard_ms=5000)],
    ids=["no-heard-ms", "pipecats-own", "all-heard"],
)
def test_other_interruptions_leave_the_message_as_pipecat_wrote_it(interruption):
    messages = asyncio.run(_run(interruption))
    assert messages[-1] == {"role": "assistant", "content": "one two three four five"}


def test_disabled_leaves_the_message_as_pipecat_wrote_it():
    messages = asyncio.run(_run(OntimeBargeInFrame(heard_ms=450), enabled=False))
    assert messages[-1] == {"role": "assistant", "content": "one two three four five"}


# The serializer: heardMs into the frame, anything malformed to None, never an exception.

SID = "MZ" + "0" * 32


class _Setup:
    audio_in_sample_rate = 16000


def _barge_in(body) -> str:
    message = {"event": "ontime.barge_in", "sequenceNumber": "9", "streamSid": SID}
    if body is not ...:
        message["bargeIn"] = body
    return json.dumps(message)


@pytest.mark.parametrize(
    "body,heard_ms,last_mark",
    [
        ({"heardMs": 1180, "lastMark": "sentence-2"}, 1180, "sentence-2"),
        ({"heardMs": 0, "lastMark": None}, 0, None),
        ({"heardMs": 12.9}, 12, None),
        ({"heardMs": -5}, None, None),
        ({"heardMs": "1180"}, None, None),
        ({"heardMs": True, "lastMark": 7}, None, None),
        ({"heardMs": None}, None, None),
        ({}, None, None),
        ("junk", None, None),
        (..., None, None),
    ],
)
def test_barge_in_frame_carries_heard_ms_or_none(body, heard_ms, last_mark):
    async def go():
        s = OntimeFrameSerializer(stream_sid=SID)
        await s.setup(_Setup())  # type: ignore[arg-type]
        return await s.deserialize(_barge_in(body))

    frame = asyncio.run(go())
    assert isinstance(frame, OntimeBargeInFrame) and isinstance(frame, InterruptionFrame)
    assert (frame.heard_ms, frame.last_mark) == (heard_ms, last_mark)


def test_malformed_heard_ms_reaches_the_context_unchanged():
    async def go():
        s = OntimeFrameSerializer(stream_sid=SID)
        await s.setup(_Setup())  # type: ignore[arg-type]
        return await s.deserialize(_barge_in({"heardMs": "soon"}))

    messages = asyncio.run(_run(asyncio.run(go())))
    assert messages[-1] == {"role": "assistant", "content": "one two three four five"}
