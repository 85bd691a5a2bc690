"""OntimeFrameSerializer: ontime's messages in, pipecat frames out. No network."""

import asyncio
import base64
import json

import pytest
from pipecat.frames.frames import (
    InputAudioRawFrame,
    InputDTMFFrame,
    InterruptionFrame,
    OutputAudioRawFrame,
    ProposedUserStartedSpeakingFrame,
    ProposedUserStoppedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.processors.frame_processor import FrameProcessorSetup
from pipecat.serializers.twilio import TwilioFrameSerializer
from pipecat.turns.user_start import ExternalUserTurnStartStrategy
from pipecat.turns.user_stop import ExternalUserTurnStopStrategy

from ontime_pipecat import (
    OntimeFrameSerializer,
    OntimeTurnResumedFrame,
    ontime_user_turn_strategies,
    serializer_from_start,
)

SID = "MZ" + "0" * 32

START = {
    "event": "start",
    "sequenceNumber": "1",
    "streamSid": SID,
    "start": {
        "streamSid": SID,
        "accountSid": "AC" + "0" * 32,
        "callSid": "CA" + "1" * 32,
        "tracks": ["inbound"],
        "customParameters": {"From": "sip:alice@trunk", "To": "sip:bot@gw", "CallId": "x"},
        "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1},
    },
}


def run(coro):
    return asyncio.run(coro)


class _Setup:
    """The part of FrameProcessorSetup the serializer reads."""

    audio_in_sample_rate = 16000


async def _serializer(**params) -> OntimeFrameSerializer:
    s = serializer_from_start(START, params=OntimeFrameSerializer.InputParams(**params))
    await s.setup(_Setup())  # type: ignore[arg-type]
    return s


def msg(event: str, seq: int = 5, **extra) -> str:
    return json.dumps({"event": event, "sequenceNumber": str(seq), "streamSid": SID, **extra})


def test_speech_started_proposes_a_user_turn():
    async def go():
        s = await _serializer()
        return await s.deserialize(msg("ontime.speech_started"))

    assert isinstance(run(go()), ProposedUserStartedSpeakingFrame)


def test_speech_stopped_is_a_pause_not_the_end_of_the_turn():
    async def go():
        s = await _serializer()
        a = await s.deserialize(msg("ontime.speech_stopped"))
        s2 = await _serializer(speech_stopped_frames=False)
        b = await s2.deserialize(msg("ontime.speech_stopped"))
        return a, b

    a, b = run(go())
    assert isinstance(a, VADUserStoppedSpeakingFrame)
    assert not isinstance(a, ProposedUserStoppedSpeakingFrame)
    assert b is None


@pytest.mark.parametrize("probability,expected", [(0.93, 0.93), (None, None), ("junk", None)])
def test_turn_ended_proposes_the_end_of_the_turn(probability, expected):
    async def go():
        s = await _serializer()
        frame = await s.deserialize(msg("ontime.turn_ended", turn={"probability": probability}))
        return s, frame

    s, frame = run(go())
    assert isinstance(frame, ProposedUserStoppedSpeakingFrame)
    assert s.last_turn_probability == expected
    assert s.ontime_events == {"ontime.turn_ended": 1}


def test_barge_in_interrupts_unless_turned_off():
    async def go():
        on = await (await _serializer()).deserialize(msg("ontime.barge_in"))
        off = await (await _serializer(interrupt_on_barge_in=False)).deserialize(
            msg("ontime.barge_in")
        )
        return on, off

    on, off = run(go())
    assert isinstance(on, InterruptionFrame)
    assert off is None


def test_turn_resumed_interrupts_with_its_figures_unless_turned_off():
    async def go():
        on = await (await _serializer()).deserialize(
            msg("ontime.turn_resumed", turnResumed={"pauseMs": 820, "droppedMs": 5232})
        )
        bad = await (await _serializer()).deserialize(
            msg("ontime.turn_resumed", turnResumed={"pauseMs": "x"})
        )
        off = await (await _serializer(interrupt_on_turn_resumed=False)).deserialize(
            msg("ontime.turn_resumed", turnResumed={"pauseMs": 820, "droppedMs": 0})
        )
        return on, bad, off

    on, bad, off = run(go())
    assert isinstance(on, OntimeTurnResumedFrame)
    assert isinstance(on, InterruptionFrame)
    assert (on.pause_ms, on.dropped_ms) == (820, 5232)
    assert isinstance(bad, OntimeTurnResumedFrame)
    assert (bad.pause_ms, bad.dropped_ms) == (None, None)
    assert off is None


def test_unknown_ontime_event_and_junk_are_ignored():
    async def go():
        s = await _serializer()
        return [
            await s.deserialize(msg("ontime.something_new")),
            await s.deserialize('{"event":"ontime.speech_started"'),  # cut short
            await s.deserialize("[1,2]"),
            await s.deserialize(msg("mark", mark={"name": "reply-1"})),
            await s.deserialize(msg("stop", stop={})),
        ]

    assert run(go()) == [None, None, None, None, None]


def test_media_and_dtmf_still_work_as_on_twilio():
    ulaw = bytes([0xFF] * 80 + [0x00] * 80)  # 20 ms: silence then loud

    async def go():
        s = await _serializer()
        # The stream resampler (8 kHz to the pipeline's 16 kHz) hands out ~100 ms at a time.
        frames = [
            await s.deserialize(
                msg("media", media={"track": "inbound", "chunk": str(i), "timestamp": "0",
                                    "payload": base64.b64encode(ulaw).decode()})
            )
            for i in range(1, 13)
        ]
        media = next(f for f in frames if f is not None)
        dtmf = await s.deserialize(msg("dtmf", dtmf={"track": "inbound_track", "digit": "7"}))
        return media, dtmf

    media, dtmf = run(go())
    assert isinstance(media, InputAudioRawFrame)
    assert media.sample_rate == 16000 and media.num_channels == 1
    assert len(media.audio) > 0
    assert isinstance(dtmf, InputDTMFFrame) and dtmf.button.value == "7"


def test_bytes_messages_are_understood_too():
    async def go():
        s = await _serializer()
        return await s.deserialize(msg("ontime.turn_ended", turn={"probability": 0.7}).encode())

    assert isinstance(run(go()), ProposedUserStoppedSpeakingFrame)


def test_output_is_twilio_media_and_clear_and_no_rest_hang_up():
    async def go():
        s = await _serializer()
        outs = [
            await s.serialize(
                OutputAudioRawFrame(audio=b"\x00\x10" * 320, sample_rate=16000, num_channels=1)
            )
            for _ in range(12)
        ]
        audio = next(o for o in outs if o)
        clear = await s.serialize(InterruptionFrame())
        return s, audio, clear

    s, audio, clear = run(go())
    assert s._params.auto_hang_up is False
    m = json.loads(audio)
    assert m["event"] == "media" and m["streamSid"] == SID
    assert len(base64.b64decode(m["media"]["payload"])) > 0
    assert json.loads(clear) == {"event": "clear", "streamSid": SID}


def test_serializer_from_start_builds_either_class():
    s = serializer_from_start(START)
    assert isinstance(s, OntimeFrameSerializer)
    assert s._stream_sid == SID and s._call_sid == "CA" + "1" * 32
    t = serializer_from_start(
        START,
        params=TwilioFrameSerializer.InputParams(auto_hang_up=False),
        serializer_class=TwilioFrameSerializer,
    )
    assert type(t) is TwilioFrameSerializer


def test_turn_strategies_are_external_and_configurable():
    st = ontime_user_turn_strategies(enable_interruptions=False, wait_for_transcript=False)
    assert len(st.start) == 1 and isinstance(st.start[0], ExternalUserTurnStartStrategy)
    assert st.start[0]._enable_interruptions is False
    assert len(st.stop) == 1 and isinstance(st.stop[0], ExternalUserTurnStopStrategy)
    assert st.stop[0].wait_for_transcript is False
    default = ontime_user_turn_strategies()
    assert default.start[0]._enable_interruptions is True
    assert default.stop[0].wait_for_transcript is True
