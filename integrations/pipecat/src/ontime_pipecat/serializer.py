"""A TwilioFrameSerializer that also understands ontime's own events."""

import json
import math
from dataclasses import dataclass
from typing import Any

from pipecat.frames.frames import (
    Frame,
    InterruptionFrame,
    ProposedUserStartedSpeakingFrame,
    ProposedUserStoppedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.serializers.twilio import TwilioFrameSerializer
from pipecat.turns.user_start import ExternalUserTurnStartStrategy
from pipecat.turns.user_stop import ExternalUserTurnStopStrategy
from pipecat.turns.user_turn_strategies import UserTurnStrategies


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
        """

        auto_hang_up: bool = False
        interrupt_on_barge_in: bool = True
        interrupt_on_turn_resumed: bool = True
        speech_stopped_frames: bool = True

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

    async def deserialize(self, data: str | bytes) -> Frame | None:
        """Deserialize one message from ontime (see the class docs for the mapping)."""
        event = _ontime_event(data)
        if event is None:
            try:
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
    """
    cls = serializer_class or OntimeFrameSerializer
    body = start.get("start", start)
    return cls(stream_sid=body["streamSid"], call_sid=body.get("callSid"), params=params)
