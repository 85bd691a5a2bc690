"""pipecat support for the ontime SIP/RTP gateway.

ontime speaks Twilio Media Streams to a bot, plus (with ``--ws-ontime-events true``) its own
``ontime.speech_started``, ``ontime.speech_stopped``, ``ontime.turn_ended`` and
``ontime.barge_in`` and ``ontime.turn_resumed`` events. :class:`OntimeFrameSerializer` turns those into the frames pipecat
1.14's user aggregator and interruption logic expect, so a bot can leave its own VAD and turn
model off; :func:`ontime_user_turn_strategies` is the matching turn configuration.
:class:`HeardReplyTrimmer` uses ``ontime.barge_in``'s ``heardMs`` to keep only the heard part
of a cut reply in the LLM context. :class:`OntimeTranscriptForwarder`, placed after the STT
service, sends its results back as ``ontime.transcript`` for the gateway's reply hold-back.
``OntimeFrameSerializer.InputParams(audio_format=OntimeAudioFormat.L16_16K)`` speaks the
gateway's 16 kHz PCM (``--ws-content-type "audio/l16;rate=16000"``) instead of µ-law.
"""

from ontime_pipecat.heard import HeardReplyTrimmer, SpokenText, trim_to_heard
from ontime_pipecat.serializer import (
    OntimeAudioFormat,
    OntimeBargeInFrame,
    OntimeFrameSerializer,
    OntimeTurnResumedFrame,
    ontime_user_turn_strategies,
    serializer_from_start,
)
from ontime_pipecat.transcript import OntimeTranscriptForwarder, ontime_transcript_message

__all__ = [
    "HeardReplyTrimmer",
    "OntimeAudioFormat",
    "OntimeBargeInFrame",
    "OntimeFrameSerializer",
    "OntimeTranscriptForwarder",
    "OntimeTurnResumedFrame",
    "SpokenText",
    "ontime_transcript_message",
    "ontime_user_turn_strategies",
    "serializer_from_start",
    "trim_to_heard",
]
