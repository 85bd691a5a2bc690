"""pipecat support for the ontime SIP/RTP gateway.

ontime speaks Twilio Media Streams to a bot, plus (with ``--ws-ontime-events true``) its own
``ontime.speech_started``, ``ontime.speech_stopped``, ``ontime.turn_ended`` and
``ontime.barge_in`` events. :class:`OntimeFrameSerializer` turns those into the frames pipecat
1.14's user aggregator and interruption logic expect, so a bot can leave its own VAD and turn
model off; :func:`ontime_user_turn_strategies` is the matching turn configuration.
"""

from ontime_pipecat.serializer import (
    OntimeFrameSerializer,
    ontime_user_turn_strategies,
    serializer_from_start,
)

__all__ = ["OntimeFrameSerializer", "ontime_user_turn_strategies", "serializer_from_start"]
