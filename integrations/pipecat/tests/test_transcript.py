"""OntimeTranscriptForwarder: STT results go back to the gateway as ``ontime.transcript``."""

import asyncio
import json

from pipecat.frames.frames import (
    InterimTranscriptionFrame,
    OutputTransportMessageUrgentFrame,
    TextFrame,
    TranscriptionFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.tests.utils import run_test

from ontime_pipecat import OntimeFrameSerializer, OntimeTranscriptForwarder


class _Collect(FrameProcessor):
    """Keeps every frame that reaches the end of the pipeline, in order."""

    def __init__(self):
        super().__init__()
        self.frames = []

    async def process_frame(self, frame, direction):
        await super().process_frame(frame, direction)
        if direction == FrameDirection.DOWNSTREAM:
            self.frames.append(frame)
        await self.push_frame(frame, direction)


def _run(frames, **kwargs):
    forwarder = OntimeTranscriptForwarder("MZ1", **kwargs)
    sink = _Collect()
    asyncio.run(run_test(Pipeline([forwarder, sink]), frames_to_send=frames))
    return forwarder, sink.frames


def _frames():
    return [
        InterimTranscriptionFrame("I'd like to move my", "caller", "t1"),
        TranscriptionFrame("I'd like to move my appointment to", "caller", "t2"),
        TextFrame("not a transcription"),
        InterimTranscriptionFrame("   ", "caller", "t3"),
        TranscriptionFrame("Friday.", "caller", "t4"),
    ]


def test_each_result_is_passed_on_and_sent_as_a_transcript_message():
    forwarder, frames = _run(_frames())
    messages = [f.message for f in frames if isinstance(f, OutputTransportMessageUrgentFrame)]
    assert messages == [
        {
            "event": "ontime.transcript",
            "transcript": {"text": "I'd like to move my", "final": False},
            "streamSid": "MZ1",
        },
        {
            "event": "ontime.transcript",
            "transcript": {"text": "I'd like to move my appointment to", "final": True},
            "streamSid": "MZ1",
        },
        {
            "event": "ontime.transcript",
            "transcript": {"text": "Friday.", "final": True},
            "streamSid": "MZ1",
        },
    ]
    assert forwarder.sent == 3
    # Every frame sent in still comes out, the transcriptions included.
    kinds = [type(f).__name__ for f in frames if not isinstance(f, OutputTransportMessageUrgentFrame)]
    assert kinds.count("TranscriptionFrame") == 2
    assert kinds.count("InterimTranscriptionFrame") == 2
    assert kinds.count("TextFrame") == 1


def test_interim_results_can_be_left_out():
    forwarder, frames = _run(_frames(), interim=False)
    texts = [
        f.message["transcript"]["text"]
        for f in frames
        if isinstance(f, OutputTransportMessageUrgentFrame)
    ]
    assert texts == ["I'd like to move my appointment to", "Friday."]
    assert forwarder.sent == 2


def test_the_serializer_writes_the_message_the_gateway_parses():
    serializer = OntimeFrameSerializer("MZ1")
    frame = OutputTransportMessageUrgentFrame(
        message={"event": "ontime.transcript", "transcript": {"text": "and", "final": False}}
    )
    data = asyncio.run(serializer.serialize(frame))
    assert json.loads(data) == {
        "event": "ontime.transcript",
        "transcript": {"text": "and", "final": False},
    }
