"""Keep in the LLM context only the part of a cut reply that the caller heard.

pipecat writes an interrupted reply into its context as the text its output transport had
released: each word as its audio went to the WebSocket. ontime queues that audio and plays it
at 20 ms a packet, so when the caller barges in the bot has *sent* more than the caller has
*heard*; the LLM would otherwise believe it said words nobody heard. ``ontime.barge_in``
carries ``heardMs``; :class:`HeardReplyTrimmer` maps it back onto the reply's text.
"""

import re
from collections.abc import Sequence
from dataclasses import dataclass

from pipecat.frames.frames import (
    CancelFrame,
    EndFrame,
    Frame,
    InterruptionFrame,
    LLMAssistantPushAggregationFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    TTSAudioRawFrame,
    TTSStartedFrame,
    TTSTextFrame,
)
from pipecat.processors.aggregators.llm_response_universal import (
    AssistantTurnStoppedMessage,
    LLMAssistantAggregator,
)
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor

from ontime_pipecat.serializer import OntimeBargeInFrame

_WORD = re.compile(r"\S+")

#: Frames after which the assistant aggregator has committed (or dropped) the reply: the next
#: audio and text belong to another reply.
_REPLY_ENDS = (
    InterruptionFrame,
    LLMFullResponseEndFrame,
    LLMAssistantPushAggregationFrame,
    EndFrame,
    CancelFrame,
)


@dataclass(frozen=True)
class SpokenText:
    """Text of a reply as the output transport released it.

    Parameters:
        text: A word (a word-timestamp TTS) or a sentence (any other TTS).
        start_ms: The reply's audio released before it: for a word-timestamp TTS the word's
            start, since pipecat releases each word at its timestamp.
    """

    text: str
    start_ms: float


def trim_to_heard(
    content: str,
    heard_ms: int,
    spoken: Sequence[SpokenText],
    audio_ms: float,
    cut_marker: str = "…",
) -> str | None:
    """The start of ``content`` the caller heard, ``cut_marker`` appended; ``""`` when they
    heard none of it; None when it all was heard or there is no way to tell.

    A word counts as heard when it began before ``heard_ms`` (pipecat's own rule: it releases
    a word as its audio starts). Its start comes from ``spoken`` when those parts hold the same
    words as ``content``: a word's own start, or, inside a longer part, the part's span shared
    out by characters. Otherwise (the text reached the context some other way) the whole reply
    is shared out that way over ``audio_ms``, the reply's audio released. The cut always falls
    at the end of a word, so the context never holds half a word.
    """
    words = list(_WORD.finditer(content))
    starts = _word_starts(spoken, audio_ms)
    if len(starts) != len(words):
        if audio_ms <= 0:
            return None
        starts = _word_starts([SpokenText(content, 0.0)], audio_ms)
    heard = sum(1 for start in starts if start < heard_ms)
    if heard >= len(words):
        return None
    if heard == 0:
        return ""
    return content[: words[heard - 1].end()] + cut_marker


def _word_starts(spoken: Sequence[SpokenText], audio_ms: float) -> list[float]:
    """When each word of ``spoken`` began, in milliseconds from the start of the reply."""
    starts: list[float] = []
    for i, part in enumerate(spoken):
        end = spoken[i + 1].start_ms if i + 1 < len(spoken) else max(audio_ms, part.start_ms)
        span = end - part.start_ms
        for word in _WORD.finditer(part.text):
            starts.append(part.start_ms + span * word.start() / len(part.text))
    return starts


@dataclass(frozen=True)
class _Cut:
    """A barge-in the assistant aggregator has yet to commit the reply for."""

    heard_ms: int
    spoken: tuple[SpokenText, ...]
    audio_ms: float


class HeardReplyTrimmer(FrameProcessor):
    """Cuts the assistant message of a reply ontime cut back to what the caller heard.

    Place it between the output transport and the assistant aggregator, where the reply's
    audio and text come out as pipecat plays them::

        Pipeline([transport.input(), aggregators.user(), llm, tts, transport.output(),
                  HeardReplyTrimmer(aggregators.assistant()), aggregators.assistant()])

    It notes each ``TTSTextFrame`` with the reply audio released before it. On an
    :class:`OntimeBargeInFrame` with a ``heard_ms`` it waits for the aggregator to commit the
    interrupted reply (``on_assistant_turn_stopped``), then replaces that message with
    :func:`trim_to_heard`'s text, or removes it when the caller heard none of it (so the LLM
    does not answer as if it had been heard). Any other interruption (pipecat's own, or a
    barge-in without ``heardMs``) leaves the context as pipecat wrote it.

    ``heardMs`` counts from the start of the gateway's current reply (docs/agents.md): this
    counts from the start of the assistant turn, which is the same audio unless the bot paused
    250 ms or more inside one LLM response; then less than was heard is kept.

    Parameters:
        assistant: The pipeline's assistant aggregator, whose context is rewritten.
        enabled: False: pass everything through and leave the context alone.
        cut_marker: Appended to a cut message, telling the LLM it was interrupted there.
    """

    def __init__(
        self,
        assistant: LLMAssistantAggregator,
        *,
        enabled: bool = True,
        cut_marker: str = "…",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self._assistant = assistant
        self._enabled = enabled
        self._cut_marker = cut_marker
        self._spoken: list[SpokenText] = []
        self._audio_ms = 0.0
        self._cut: _Cut | None = None
        if enabled:
            assistant.add_event_handler("on_assistant_turn_stopped", self._on_turn_stopped)

    async def process_frame(self, frame: Frame, direction: FrameDirection):
        """Note the reply's audio and text on their way to the aggregator; pass everything on."""
        await super().process_frame(frame, direction)
        if self._enabled and direction == FrameDirection.DOWNSTREAM:
            self._note(frame)
        await self.push_frame(frame, direction)

    def _note(self, frame: Frame):
        if isinstance(frame, TTSAudioRawFrame):
            bytes_per_ms = frame.sample_rate * frame.num_channels * 2 / 1000
            self._audio_ms += len(frame.audio) / bytes_per_ms
        elif isinstance(frame, TTSTextFrame):
            if frame.append_to_context and frame.text:
                self._spoken.append(SpokenText(frame.text, self._audio_ms))
        elif isinstance(frame, (TTSStartedFrame, LLMFullResponseStartFrame)):
            # A cut the aggregator never committed (it had no turn open) must not land on
            # this new reply.
            self._cut = None
        if isinstance(frame, _REPLY_ENDS):
            self._cut = None
            if isinstance(frame, OntimeBargeInFrame) and frame.heard_ms is not None:
                self._cut = _Cut(frame.heard_ms, tuple(self._spoken), self._audio_ms)
            self._spoken = []
            self._audio_ms = 0.0

    async def _on_turn_stopped(self, _aggregator, message: AssistantTurnStoppedMessage):
        cut, self._cut = self._cut, None
        if cut is None or not message.interrupted or not message.content:
            return
        context = self._assistant.context
        messages = list(context.get_messages())
        last = messages[-1] if messages else None
        if not (
            isinstance(last, dict)
            and last.get("role") == "assistant"
            and isinstance(last.get("content"), str)
        ):
            return
        heard = trim_to_heard(
            last["content"], cut.heard_ms, cut.spoken, cut.audio_ms, self._cut_marker
        )
        if heard is None:
            return
        kept = [{**last, "content": heard}] if heard else []
        context.set_messages(messages[:-1] + kept)
