"""A TwilioFrameSerializer that also understands ontime's own events and its 16 kHz PCM."""

import base64
import json
import math
import sys
from dataclasses import dataclass
from enum import Enum
from typing import Any

import numpy as np
from loguru import logger
from pipecat.audio.utils import create_stream_resampler
from pipecat.frames.frames import (
    AudioRawFrame,
    Frame,
    InputAudioRawFrame,
    InterruptionFrame,
    ProposedUserStartedSpeakingFrame,
    ProposedUserStoppedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.serializers.twilio import TwilioFrameSerializer
from pipecat.turns.user_start import ExternalUserTurnStartStrategy
from pipecat.turns.user_stop import ExternalUserTurnStopStrategy
from pipecat.turns.user_turn_strategies import UserTurnStrategies
from pydantic import field_validator


class OntimeAudioFormat(str, Enum):
    """The audio of ontime's ``media`` messages, both ways (the gateway's ``--ws-content-type``
    or ``<Stream contentType>``; its ``start`` message names it in ``mediaFormat``).

    - ``MULAW_8K`` (``"mulaw_8k"``): ``audio/x-mulaw;rate=8000``, Twilio's; 160 bytes per 20 ms.
    - ``L16_16K`` (``"l16_16k"``): ``audio/l16;rate=16000``, 16-bit little-endian signed PCM at
      16 kHz; 640 bytes (320 samples) per 20 ms from the gateway, any length back.
    """

    MULAW_8K = "mulaw_8k"
    L16_16K = "l16_16k"

    @property
    def content_type(self) -> str:
        """The MIME type, as the gateway's ``--ws-content-type`` takes it."""
        return _CONTENT_TYPES[self]

    @property
    def encoding(self) -> str:
        """``mediaFormat.encoding`` in the ``start`` message."""
        return self.content_type.split(";", 1)[0]

    @property
    def sample_rate(self) -> int:
        """The sample rate on the wire."""
        return 8000 if self is OntimeAudioFormat.MULAW_8K else 16000

    @classmethod
    def from_content_type(cls, value: str) -> "OntimeAudioFormat | None":
        """The format a MIME type names (case and spaces around ``;`` ignored, as the gateway
        reads it), or None when ontime does not stream it."""
        normal = ";".join(part.strip().lower() for part in value.split(";"))
        return next((f for f in cls if f.content_type == normal), None)

    @classmethod
    def from_media_format(cls, media_format: Any) -> "OntimeAudioFormat | None":
        """The format a ``start`` message's ``mediaFormat`` object names, or None when it is
        not one ontime streams (or not an object)."""
        if not isinstance(media_format, dict):
            return None
        encoding = media_format.get("encoding")
        rate = media_format.get("sampleRate")
        channels = media_format.get("channels", 1)
        if not isinstance(encoding, str) or channels != 1:
            return None
        for f in cls:
            if f.encoding == encoding.strip().lower() and rate == f.sample_rate:
                return f
        return None


_CONTENT_TYPES = {
    OntimeAudioFormat.MULAW_8K: "audio/x-mulaw;rate=8000",
    OntimeAudioFormat.L16_16K: "audio/l16;rate=16000",
}
_BIG_ENDIAN_HOST = sys.byteorder == "big"


@dataclass
class OntimeBargeInFrame(InterruptionFrame):
    """The gateway cut the reply (``ontime.barge_in``): an :class:`InterruptionFrame`, so pipecat
    stops the reply as for any interruption, carrying what the caller heard of it.

    Parameters:
        heard_ms: Milliseconds of the current reply played out to the caller before their
            speech began; None when the event did not carry a usable number.
        last_mark: The last of the reply's marks that had played, if any.
    """

    heard_ms: int | None = None
    last_mark: str | None = None


@dataclass
class OntimeTurnResumedFrame(InterruptionFrame):
    """The caller went on speaking after ``ontime.turn_ended`` before the reply was heard
    (``ontime.turn_resumed``): the end was a mid-sentence pause. The gateway has dropped the
    reply's queued audio, and drops what the bot still sends of it until its ``clear`` or the
    next ``ontime.turn_ended``; as an :class:`InterruptionFrame` this cancels the reply pipecat
    is still generating (LLM, TTS), which then answers the whole sentence at the next end.

    Parameters:
        pause_ms: From the end of the caller's speech to their resumption.
        dropped_ms: Reply audio the gateway dropped unheard.
    """

    pause_ms: int | None = None
    dropped_ms: int | None = None


class OntimeFrameSerializer(TwilioFrameSerializer):
    """Twilio Media Streams as ontime speaks them, with ontime's events mapped to pipecat frames.

    - ``ontime.speech_started`` → :class:`ProposedUserStartedSpeakingFrame`: the user
      aggregator's :class:`ExternalUserTurnStartStrategy` opens the user turn (or keeps it
      open), broadcasts ``UserStartedSpeakingFrame`` and, when its ``enable_interruptions`` is
      on, interrupts the bot (pipecat stops its output and sends ``clear``).
    - ``ontime.speech_stopped`` → :class:`VADUserStoppedSpeakingFrame`: the caller paused.
      Not the end of the turn; STT services finalize on it, and the user aggregator's
      ``user_turn_stop_timeout`` counts from it.
    - ``ontime.turn_ended`` → :class:`ProposedUserStoppedSpeakingFrame`: Smart Turn v3 (or the
      gateway's stop timeout) decided the turn is over; :class:`ExternalUserTurnStopStrategy`
      ends the user turn (``UserStoppedSpeakingFrame``), after the transcript when it waits
      for one. The probability is kept in :attr:`last_turn_probability`.
    - ``ontime.barge_in`` → :class:`OntimeBargeInFrame`, an :class:`InterruptionFrame`
      (``interrupt_on_barge_in``, default on): the gateway has already dropped the bot's queued
      audio (``--barge-in local``); this stops the rest of the reply in pipecat too. pipecat
      then records in its context the text it had released, which runs ahead of what the
      caller heard; the frame's ``heard_ms`` lets :class:`~ontime_pipecat.HeardReplyTrimmer`
      cut that message back to the heard part.
    - ``ontime.turn_resumed`` → :class:`OntimeTurnResumedFrame`, an :class:`InterruptionFrame`
      (``interrupt_on_turn_resumed``, default on): the turn end was a pause and the caller
      went on; the reply being prepared is cancelled (its audio, if any, was never heard).

    Everything else (``media``, ``dtmf``, ``mark``, ``stop``…) is handled as by
    :class:`TwilioFrameSerializer`. ``auto_hang_up`` defaults to off: there is no Twilio REST
    API behind ontime; the bot hangs up by ending its pipeline, which closes the WebSocket with
    code 1000, and the gateway sends the BYE.

    Audio is Twilio's µ-law at 8 kHz unless ``audio_format`` says otherwise:
    ``OntimeAudioFormat.L16_16K`` (``"l16_16k"``, for a gateway run with ``--ws-content-type
    "audio/l16;rate=16000"``) reads and writes 16-bit little-endian PCM at 16 kHz instead,
    resampled from and to the pipeline's rates with pipecat's stream resampler as
    :class:`TwilioFrameSerializer` does (none at pipecat's default 16 kHz input). A ``start``
    message that reaches :meth:`deserialize` (a bot that does not read it itself) sets the format
    from its ``mediaFormat``, as :func:`serializer_from_start` does.
    """

    class InputParams(TwilioFrameSerializer.InputParams):
        """Parameters.

        Parameters:
            auto_hang_up: Off: ontime has no Twilio REST API.
            interrupt_on_barge_in: Turn ``ontime.barge_in`` into an ``OntimeBargeInFrame`` (an
                ``InterruptionFrame``).
            speech_stopped_frames: Turn ``ontime.speech_stopped`` into a
                ``VADUserStoppedSpeakingFrame``.
            interrupt_on_turn_resumed: Turn ``ontime.turn_resumed`` into an
                ``OntimeTurnResumedFrame`` (an ``InterruptionFrame``).
            audio_format: The ``media`` audio, both ways: ``OntimeAudioFormat.MULAW_8K``
                (``"mulaw_8k"``, Twilio's, the default) or ``OntimeAudioFormat.L16_16K``
                (``"l16_16k"``: 16-bit little-endian PCM at 16 kHz); the gateway's MIME type
                (``"audio/l16;rate=16000"``) is taken too. It must match the gateway's
                ``--ws-content-type`` (or the TwiML ``<Stream contentType>``).
        """

        auto_hang_up: bool = False
        interrupt_on_barge_in: bool = True
        interrupt_on_turn_resumed: bool = True
        speech_stopped_frames: bool = True
        audio_format: OntimeAudioFormat = OntimeAudioFormat.MULAW_8K

        @field_validator("audio_format", mode="before")
        @classmethod
        def _content_type_too(cls, value: Any) -> Any:
            """``"audio/l16;rate=16000"`` as well as ``"l16_16k"``."""
            if isinstance(value, str) and not isinstance(value, OntimeAudioFormat) and "/" in value:
                return OntimeAudioFormat.from_content_type(value) or value
            return value

    def __init__(self, stream_sid: str, call_sid: str | None = None, params=None, **kwargs):
        """Same arguments as :class:`TwilioFrameSerializer`; ``params`` is an ``InputParams``."""
        params = params or OntimeFrameSerializer.InputParams()
        super().__init__(stream_sid, call_sid, params=params, **kwargs)
        self._ontime_params: OntimeFrameSerializer.InputParams = params
        #: Smart Turn v3's probability with the last ``ontime.turn_ended`` (None: the
        #: gateway's stop timeout decided, or no turn ended yet).
        self.last_turn_probability: float | None = None
        #: How many of each ``ontime.*`` event arrived.
        self.ontime_events: dict[str, int] = {}
        self._audio_format = OntimeAudioFormat(params.audio_format)
        self._l16_carry: bytes = b""  # a byte of the bot-bound stream's next sample

    @property
    def audio_format(self) -> OntimeAudioFormat:
        """The ``media`` audio format in use (``InputParams.audio_format``, or the ``start``
        message's ``mediaFormat`` when :meth:`deserialize` saw one)."""
        return self._audio_format

    def _use_audio_format(self, audio_format: OntimeAudioFormat):
        if audio_format is self._audio_format:
            return
        logger.info(f"ontime: media audio is {audio_format.content_type}")
        self._audio_format = audio_format
        # A stream resampler is bound to one pair of rates: start afresh.
        self._input_resampler = create_stream_resampler(
            clear_after_secs=self._params.resampler_clear_after_secs
        )
        self._output_resampler = create_stream_resampler(
            clear_after_secs=self._params.resampler_clear_after_secs
        )
        self._l16_carry = b""

    async def serialize(self, frame: Frame) -> str | bytes | None:
        """Serialize a frame for ontime: as :class:`TwilioFrameSerializer` does, with audio as
        16-bit PCM at 16 kHz when the format is ``L16_16K``."""
        if self._audio_format is OntimeAudioFormat.L16_16K and isinstance(frame, AudioRawFrame):
            pcm = await self._output_resampler.resample(
                frame.audio, frame.sample_rate, OntimeAudioFormat.L16_16K.sample_rate
            )
            if not pcm:
                return None
            if _BIG_ENDIAN_HOST:
                pcm = _swap_bytes(pcm)
            return json.dumps(
                {
                    "event": "media",
                    "streamSid": self._stream_sid,
                    "media": {"payload": base64.b64encode(pcm).decode("ascii")},
                }
            )
        return await super().serialize(frame)

    async def deserialize(self, data: str | bytes) -> Frame | None:
        """Deserialize one message from ontime (see the class docs for the mapping)."""
        event = _ontime_event(data)
        if event is None:
            try:
                if self._audio_format is OntimeAudioFormat.L16_16K or _may_be_start(data):
                    return await self._deserialize_start_or_l16(data)
                return await super().deserialize(data)
            except (AttributeError, TypeError, ValueError):
                # JSON that is not an object: TwilioFrameSerializer would raise, and an
                # exception ends the input transport's receive loop. Ignore the message.
                return None
        name, message = event
        self.ontime_events[name] = self.ontime_events.get(name, 0) + 1
        if name == "ontime.speech_started":
            return ProposedUserStartedSpeakingFrame()
        if name == "ontime.speech_stopped":
            return VADUserStoppedSpeakingFrame() if self._ontime_params.speech_stopped_frames else None
        if name == "ontime.turn_ended":
            turn = message.get("turn") or {}
            probability = turn.get("probability") if isinstance(turn, dict) else None
            self.last_turn_probability = (
                float(probability) if isinstance(probability, (int, float)) else None
            )
            return ProposedUserStoppedSpeakingFrame()
        if name == "ontime.barge_in":
            if not self._ontime_params.interrupt_on_barge_in:
                return None
            barge_in = message.get("bargeIn")
            barge_in = barge_in if isinstance(barge_in, dict) else {}
            last_mark = barge_in.get("lastMark")
            return OntimeBargeInFrame(
                heard_ms=_milliseconds(barge_in.get("heardMs")),
                last_mark=last_mark if isinstance(last_mark, str) else None,
            )
        if name == "ontime.turn_resumed":
            if not self._ontime_params.interrupt_on_turn_resumed:
                return None
            resumed = message.get("turnResumed")
            resumed = resumed if isinstance(resumed, dict) else {}
            return OntimeTurnResumedFrame(
                pause_ms=_milliseconds(resumed.get("pauseMs")),
                dropped_ms=_milliseconds(resumed.get("droppedMs")),
            )
        return None  # a newer ontime event this version does not know

    async def _deserialize_start_or_l16(self, data: str | bytes) -> Frame | None:
        """``media`` in 16-bit PCM at 16 kHz, and ``start`` (whose ``mediaFormat`` sets the
        format); anything else as :class:`TwilioFrameSerializer` reads it."""
        message = json.loads(data)
        event = message.get("event")
        if event == "start":
            body = message.get("start")
            media_format = body.get("mediaFormat") if isinstance(body, dict) else None
            if media_format is not None:
                audio_format = OntimeAudioFormat.from_media_format(media_format)
                if audio_format is None:
                    logger.warning(f"ontime: unknown mediaFormat {media_format!r}; keeping "
                                   f"{self._audio_format.content_type}")
                else:
                    self._use_audio_format(audio_format)
            return None
        if event != "media" or self._audio_format is not OntimeAudioFormat.L16_16K:
            return await super().deserialize(data)
        media = message.get("media")
        payload = media.get("payload") if isinstance(media, dict) else None
        if not payload:
            return None
        raw = self._l16_carry + base64.b64decode(payload)
        whole = len(raw) & ~1
        # Messages may end mid-sample (the gateway's never do): keep the odd byte for the next.
        self._l16_carry = raw[whole:]
        pcm = raw[:whole]
        if _BIG_ENDIAN_HOST:
            pcm = _swap_bytes(pcm)
        pcm = await self._input_resampler.resample(
            pcm, OntimeAudioFormat.L16_16K.sample_rate, self._sample_rate
        )
        if not pcm:
            return None
        return InputAudioRawFrame(audio=pcm, num_channels=1, sample_rate=self._sample_rate)


def _may_be_start(data: str | bytes) -> bool:
    """Whether ``data`` may be a ``start`` message: only it carries ``mediaFormat``. Cheap, for
    the 50 ``media`` messages a second."""
    return (b'"mediaFormat"' in data) if isinstance(data, bytes) else ('"mediaFormat"' in data)


def _swap_bytes(pcm: bytes) -> bytes:
    """16-bit samples between little-endian (the wire) and a big-endian host's order."""
    return np.frombuffer(pcm, dtype=np.int16).byteswap().tobytes()


def _ontime_event(data: str | bytes) -> tuple[str, dict[str, Any]] | None:
    """The event name and message when ``data`` is an ``ontime.*`` event; None otherwise.

    Cheap for the 50 ``media`` messages a second: only text mentioning ``"ontime.`` is parsed.
    """
    if isinstance(data, bytes):
        if b'"ontime.' not in data:
            return None
    elif '"ontime.' not in data:
        return None
    try:
        message = json.loads(data)
    except (ValueError, TypeError):
        return None
    if not isinstance(message, dict):
        return None
    name = message.get("event")
    if isinstance(name, str) and name.startswith("ontime."):
        return name, message
    return None


def _milliseconds(value: Any) -> int | None:
    """A non-negative whole number of milliseconds, or None for anything else (a bot must not
    act on a garbled ``heardMs``, nor fail on it)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if not math.isfinite(value) or value < 0:
        return None
    return int(value)


def ontime_user_turn_strategies(
    *, enable_interruptions: bool = True, wait_for_transcript: bool = True
) -> UserTurnStrategies:
    """User turn strategies driven by ontime's events, for ``LLMUserAggregatorParams``.

    Use with no ``vad_analyzer`` in the user aggregator's params: ontime's VAD and Smart Turn
    decide. ``enable_interruptions``: interrupt the bot when the caller starts speaking (with
    ``--barge-in bot`` this is the barge-in; with ``--barge-in local`` the gateway has already
    cut the audio). ``wait_for_transcript``: end the turn only once the STT's transcript is in
    (keep it on with an STT; turn it off for a bot that has none, or a realtime LLM).
    """
    return UserTurnStrategies(
        start=[ExternalUserTurnStartStrategy(enable_interruptions=enable_interruptions)],
        stop=[ExternalUserTurnStopStrategy(wait_for_transcript=wait_for_transcript)],
    )


def serializer_from_start(start: dict[str, Any], params=None, serializer_class=None):
    """A serializer for the stream described by ontime's ``start`` message (a parsed dict).

    ``serializer_class`` defaults to :class:`OntimeFrameSerializer`; pass
    ``TwilioFrameSerializer`` for a bot that ignores ontime's events (then give it
    ``params=TwilioFrameSerializer.InputParams(auto_hang_up=False)``).

    The audio format is the one ``mediaFormat`` names (it overrides ``params.audio_format``;
    without ``mediaFormat``, ``params`` decide). ``ValueError`` when the serializer cannot speak
    it: a ``mediaFormat`` ontime does not stream, or 16 kHz PCM with ``TwilioFrameSerializer``.
    """
    cls = serializer_class or OntimeFrameSerializer
    body = start.get("start", start)
    media_format = body.get("mediaFormat")
    if media_format is not None:
        audio_format = OntimeAudioFormat.from_media_format(media_format)
        if audio_format is None:
            raise ValueError(f"ontime start message: unknown mediaFormat {media_format!r}")
        if issubclass(cls, OntimeFrameSerializer):
            params = params or cls.InputParams()
            if params.audio_format != audio_format:
                params = params.model_copy(update={"audio_format": audio_format})
        elif audio_format is not OntimeAudioFormat.MULAW_8K:
            raise ValueError(
                f"{cls.__name__} speaks audio/x-mulaw only, the stream is "
                f"{audio_format.content_type}: use OntimeFrameSerializer"
            )
    return cls(stream_sid=body["streamSid"], call_sid=body.get("callSid"), params=params)
