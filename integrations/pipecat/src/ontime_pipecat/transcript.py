"""Forwards the bot's speech-to-text results to the gateway as ``ontime.transcript``."""

from typing import Any

from pipecat.frames.frames import (
    Frame,
    InterimTranscriptionFrame,
    OutputTransportMessageUrgentFrame,
    TranscriptionFrame,
)
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor


def ontime_transcript_message(
    text: str, final: bool, stream_sid: str | None = None
) -> dict[str, Any]:
    """The ``ontime.transcript`` message for ``text`` (the gateway judges its last words)."""
    message: dict[str, Any] = {
        "event": "ontime.transcript",
        "transcript": {"text": text, "final": final},
    }
    if stream_sid is not None:
        message["streamSid"] = stream_sid
    return message


class OntimeTranscriptForwarder(FrameProcessor):
    """Place right after the STT service: passes every frame on and, for each
    ``TranscriptionFrame`` (final) and ``InterimTranscriptionFrame`` going downstream, sends the
    gateway an ``ontime.transcript`` message with its text, as an
    ``OutputTransportMessageUrgentFrame`` the transport's :class:`OntimeFrameSerializer` writes
    to the WebSocket.

    The gateway's reply hold-back weighs the words' end: a turn that stops on "to", "and" or
    "um" holds the reply (from the caller's first pause, before anything is learned about
    them), one that ends a sentence releases it at once. Only each result's own text is sent:
    the gateway looks at its last words, and results arrive in order.

    Parameters:
        stream_sid: The stream's SID (``serializer_from_start`` has it); the gateway does not
            need it, Twilio-shaped tooling may.
        interim: Forward interim results too (default on: they carry the last words sooner).
    """

    def __init__(self, stream_sid: str | None = None, *, interim: bool = True, **kwargs):
        """See the class docs."""
        super().__init__(**kwargs)
        self._stream_sid = stream_sid
        self._interim = interim
        #: Messages sent so far.
        self.sent = 0

    async def process_frame(self, frame: Frame, direction: FrameDirection):
        """Pass the frame on; after a transcription going downstream, send its words."""
        await super().process_frame(frame, direction)
        await self.push_frame(frame, direction)
        if direction != FrameDirection.DOWNSTREAM:
            return
        if isinstance(frame, InterimTranscriptionFrame):
            final = False
            if not self._interim:
                return
        elif isinstance(frame, TranscriptionFrame):
            final = True
        else:
            return
        if not frame.text.strip():
            return
        self.sent += 1
        message = ontime_transcript_message(frame.text, final, self._stream_sid)
        await self.push_frame(OutputTransportMessageUrgentFrame(message=message))
