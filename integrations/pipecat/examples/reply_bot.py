#!/usr/bin/env python3
"""A real pipecat 1.14 bot behind ontime, for tests and measurements.

FastAPI + uvicorn serve a WebSocket; each connection is one call, run as a pipecat pipeline on a
``FastAPIWebsocketTransport`` with a Twilio serializer, exactly as a pipecat Twilio bot does.
There is no STT, LLM or TTS (nothing of the kind runs offline): when the user aggregator ends
the user's turn, :class:`CannedReply` pushes a WAV as TTS audio frames (``TTSStartedFrame``,
``TTSAudioRawFrame``…, ``TTSStoppedFrame``), and pipecat's output transport streams it like a
real TTS reply.

Turn-taking, either:

- ``--turn own``: the bot's own Silero VAD (``LLMUserAggregatorParams(vad_analyzer=…)``) and
  local Smart Turn v3 (``TurnAnalyzerUserTurnStopStrategy(LocalSmartTurnAnalyzerV3(…))``), with
  ``TwilioFrameSerializer``;
- ``--turn ontime``: no VAD or turn model in the bot; ontime's events (``--ws-ontime-events
  true`` on the gateway) through ``ontime_pipecat.OntimeFrameSerializer`` and
  ``ontime_user_turn_strategies()``.

``--interruptions off`` keeps pipecat from interrupting its reply when the caller talks (then
only the gateway's local barge-in cuts it).

``--audio l16_16k`` (``BOT_AUDIO``) takes the gateway's 16 kHz PCM (``--ws-content-type
"audio/l16;rate=16000"``) instead of µ-law, with ``OntimeFrameSerializer(audio_format=…)`` for
either ``--turn``; the default ``mulaw_8k`` is Twilio's.

``--reply-text`` gives the reply words: a ``TTSTextFrame`` per word, one every
``--reply-word-ms`` of its audio (as a word-timestamp TTS releases them), so the assistant
aggregator writes them into the context. With ontime's events, ``HeardReplyTrimmer`` (off with
``--heard-trim off``) cuts that message to the words heard when the gateway barges in. ``--goodbye`` replies once, then says a ~3 s goodbye
and ends the pipeline, which closes the WebSocket with code 1000 (the bot hung up).

Each finished call appends one JSON line to ``--record FILE``: what the bot saw (close code,
turns, replies, interruptions, ontime events, barge-ins with their ``heardMs``, the assistant
turns as pipecat committed them and the context's assistant messages at the end, the start
message's custom parameters).

    python reply_bot.py --port 8765 --turn own --record /tmp/bot.jsonl
    target/release/ontime-gateway --agent ws://127.0.0.1:8765/media-stream
"""

import argparse
import asyncio
import json
import os
import sys
import time
import wave
from pathlib import Path

import numpy as np
import soxr
import uvicorn
from fastapi import FastAPI, WebSocket
from loguru import logger
from pipecat.audio.turn.smart_turn.local_smart_turn_v3 import LocalSmartTurnAnalyzerV3
from pipecat.audio.vad.silero import SileroVADAnalyzer
from pipecat.frames.frames import (
    BotStoppedSpeakingFrame,
    EndTaskFrame,
    Frame,
    InterruptionFrame,
    LLMAssistantPushAggregationFrame,
    TTSAudioRawFrame,
    TTSStartedFrame,
    TTSStoppedFrame,
    TTSTextFrame,
    UserStartedSpeakingFrame,
    UserStoppedSpeakingFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.runner import PipelineRunner
from pipecat.pipeline.task import PipelineParams, PipelineTask
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import (
    LLMContextAggregatorPair,
    LLMUserAggregatorParams,
)
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.runner.utils import parse_telephony_websocket
from pipecat.serializers.twilio import TwilioFrameSerializer
from pipecat.transports.websocket.fastapi import (
    FastAPIWebsocketParams,
    FastAPIWebsocketTransport,
)
from pipecat.turns.user_start import VADUserTurnStartStrategy
from pipecat.turns.user_stop import TurnAnalyzerUserTurnStopStrategy
from pipecat.turns.user_turn_strategies import UserTurnStrategies
from pipecat.utils.text.base_text_aggregator import TextType

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))  # ontime_pipecat without installing it
from ontime_pipecat import (  # noqa: E402
    HeardReplyTrimmer,
    OntimeAudioFormat,
    OntimeBargeInFrame,
    OntimeFrameSerializer,
    ontime_user_turn_strategies,
)

REPO = HERE.parents[2]
AUDIO_OUT_RATE = 24000  # PipelineParams' default, as in a bot with a real TTS
CHUNK_SECS = 0.02  # TTS audio pushed in 20 ms frames


def load_wav(path: Path, rate: int, max_secs: float | None = None) -> bytes:
    """16-bit mono PCM of a WAV at ``rate`` (resampled when it differs), optionally cut."""
    with wave.open(str(path), "rb") as w:
        assert w.getsampwidth() == 2 and w.getnchannels() == 1, f"{path}: 16-bit mono expected"
        src_rate = w.getframerate()
        pcm = np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16)
    if max_secs is not None:
        pcm = pcm[: int(max_secs * src_rate)]
    if src_rate != rate:
        pcm = soxr.resample(pcm, src_rate, rate, quality="HQ").astype(np.int16)
    return pcm.tobytes()


class CallRecord:
    """What the bot saw on one call (one JSON line in ``--record``)."""

    def __init__(self, args):
        self.data = {
            "turn": args.turn,
            "audio_format": args.audio,
            "interruptions_enabled": args.interruptions == "on",
            "goodbye_mode": args.goodbye,
            "connected_unix": time.time(),
            "custom_parameters": {},
            "from_number": None,
            "to_number": None,
            "user_turns_started": 0,
            "user_turns_ended": 0,
            "replies": 0,
            "goodbyes": 0,
            "interruptions": 0,
            "ontime_events": {},
            "close_code": None,
            "close_reason": None,
            "closed_by": None,
            "turn_probabilities": [],
            "barge_ins": [],
            "assistant_turns": [],
            "assistant_messages": [],
        }

    def write(self, path: str | None):
        self.data["ended_unix"] = time.time()
        line = json.dumps(self.data)
        logger.info(f"call record: {line}")
        if path:
            with open(path, "a") as f:
                f.write(line + "\n")


class CannedReply(FrameProcessor):
    """Stands in for LLM + TTS: answers each ended user turn with a WAV as TTS audio."""

    def __init__(
        self,
        *,
        reply: bytes,
        goodbye: bytes | None,
        record: CallRecord,
        serializer,
        words: list[str],
        word_ms: int,
    ):
        super().__init__()
        self._reply = reply
        self._words = words
        self._word_ms = word_ms
        self._goodbye = goodbye
        self._record = record
        self._serializer = serializer
        self._goodbye_due = False
        self._done = False

    async def _speak(self, pcm: bytes, label: str, words: list[str]):
        context_id = f"{label}-{time.monotonic_ns()}"
        await self.push_frame(TTSStartedFrame(context_id=context_id))
        step = int(AUDIO_OUT_RATE * CHUNK_SECS) * 2
        chunks_per_word = max(1, round(self._word_ms / (CHUNK_SECS * 1000)))
        for n, i in enumerate(range(0, len(pcm), step)):
            word, at_word = divmod(n, chunks_per_word)
            if at_word == 0 and word < len(words):
                # Word k goes out after k * word_ms of audio: a multiple of the output
                # transport's 40 ms chunks keeps it exactly there.
                await self.push_frame(
                    TTSTextFrame(words[word], text_type=TextType.WORD, context_id=context_id)
                )
            await self.push_frame(
                TTSAudioRawFrame(
                    audio=pcm[i : i + step],
                    sample_rate=AUDIO_OUT_RATE,
                    num_channels=1,
                    context_id=context_id,
                )
            )
        await self.push_frame(TTSStoppedFrame(context_id=context_id))
        # As a TTS service does after a TTSSpeakFrame: the aggregator commits the reply.
        await self.push_frame(LLMAssistantPushAggregationFrame())

    async def process_frame(self, frame: Frame, direction: FrameDirection):
        await super().process_frame(frame, direction)
        await self.push_frame(frame, direction)
        if isinstance(frame, InterruptionFrame):
            self._record.data["interruptions"] += 1
            if isinstance(frame, OntimeBargeInFrame):
                self._record.data["barge_ins"].append(
                    {"heard_ms": frame.heard_ms, "last_mark": frame.last_mark}
                )
        elif isinstance(frame, UserStartedSpeakingFrame) and direction == FrameDirection.DOWNSTREAM:
            self._record.data["user_turns_started"] += 1
        elif isinstance(frame, UserStoppedSpeakingFrame) and direction == FrameDirection.DOWNSTREAM:
            self._record.data["user_turns_ended"] += 1
            probability = getattr(self._serializer, "last_turn_probability", None)
            if probability is not None:
                self._record.data["turn_probabilities"].append(probability)
            if self._done:
                return
            self._record.data["replies"] += 1
            await self._speak(self._reply, "reply", self._words)
            if self._goodbye is not None:
                self._goodbye_due = True
        elif (
            isinstance(frame, BotStoppedSpeakingFrame)
            and direction == FrameDirection.UPSTREAM
            and self._goodbye_due
        ):
            # The reply has gone out: say goodbye and hang up. EndTaskFrame ends the pipeline
            # after the queued audio; the transport then closes the WebSocket (code 1000).
            self._goodbye_due = False
            self._done = True
            self._record.data["goodbyes"] += 1
            await self._speak(self._goodbye, "goodbye", [])
            await self.push_frame(EndTaskFrame(), FrameDirection.UPSTREAM)


def watch_close(websocket: WebSocket, record: CallRecord):
    """Record the close code the gateway sends (Starlette drops it inside ``iter_text``)."""
    receive = websocket.receive
    send = websocket.send

    async def receive_and_note():
        message = await receive()
        if message.get("type") == "websocket.disconnect" and record.data["close_code"] is None:
            record.data["close_code"] = message.get("code")
            record.data["close_reason"] = message.get("reason") or ""
            record.data["closed_by"] = record.data["closed_by"] or "gateway"
        return message

    async def send_and_note(message):
        if message.get("type") == "websocket.close" and record.data["closed_by"] is None:
            record.data["closed_by"] = "bot"
            record.data["bot_close_code"] = message.get("code", 1000)
        return await send(message)

    websocket.receive = receive_and_note  # type: ignore[method-assign]
    websocket.send = send_and_note  # type: ignore[method-assign]


def make_app(args) -> FastAPI:
    app = FastAPI()
    reply = load_wav(Path(args.reply), AUDIO_OUT_RATE) * args.reply_repeat
    goodbye = None
    if args.goodbye:
        goodbye = (
            load_wav(Path(args.goodbye_wav), AUDIO_OUT_RATE)
            if args.goodbye_wav
            else load_wav(Path(args.reply), AUDIO_OUT_RATE, max_secs=3.0)
        )
    smart_turn_model = args.smart_turn_model
    if smart_turn_model is None:
        repo_model = REPO / ".cache/models/smart-turn-v3.2-cpu.onnx"
        smart_turn_model = str(repo_model) if repo_model.exists() else None  # else pipecat's

    @app.websocket("/{path:path}")
    async def media_stream(websocket: WebSocket, path: str):
        await websocket.accept()
        record = CallRecord(args)
        watch_close(websocket, record)
        # Reads `connected` and `start`; ontime sends them as Twilio does.
        transport_type, call_data = await parse_telephony_websocket(websocket)
        record.data["transport_type"] = transport_type
        record.data["custom_parameters"] = dict(call_data.body or {})
        record.data["from_number"] = call_data.from_number
        record.data["to_number"] = call_data.to_number
        record.data["call_sid"] = call_data.call_id
        record.data["stream_sid"] = call_data.stream_id
        interruptions = args.interruptions == "on"

        audio_format = OntimeAudioFormat(args.audio)
        if args.turn == "ontime" or audio_format is not OntimeAudioFormat.MULAW_8K:
            # Twilio's serializer speaks µ-law only; with no ontime events the gateway sends,
            # OntimeFrameSerializer is TwilioFrameSerializer with a choice of audio format.
            serializer = OntimeFrameSerializer(
                stream_sid=call_data.stream_id,
                call_sid=call_data.call_id,
                params=OntimeFrameSerializer.InputParams(audio_format=audio_format),
            )
        else:
            serializer = TwilioFrameSerializer(
                stream_sid=call_data.stream_id,
                call_sid=call_data.call_id,
                # No Twilio REST API behind ontime: hanging up is closing the WebSocket.
                params=TwilioFrameSerializer.InputParams(auto_hang_up=False),
            )
        if args.turn == "ontime":
            user_params = LLMUserAggregatorParams(
                user_turn_strategies=ontime_user_turn_strategies(
                    enable_interruptions=interruptions, wait_for_transcript=False
                ),
            )
        else:
            user_params = LLMUserAggregatorParams(
                vad_analyzer=SileroVADAnalyzer(),
                user_turn_strategies=UserTurnStrategies(
                    start=[VADUserTurnStartStrategy(enable_interruptions=interruptions)],
                    stop=[
                        TurnAnalyzerUserTurnStopStrategy(
                            turn_analyzer=LocalSmartTurnAnalyzerV3(
                                smart_turn_model_path=smart_turn_model
                            ),
                            # No STT here: end the turn on the model's verdict alone.
                            wait_for_transcript=False,
                        )
                    ],
                ),
            )

        transport = FastAPIWebsocketTransport(
            websocket=websocket,
            params=FastAPIWebsocketParams(
                audio_in_enabled=True,
                audio_out_enabled=True,
                add_wav_header=False,
                serializer=serializer,
                audio_out_auto_silence=args.auto_silence == "on",
                # pipecat sends 2 s of silence after an EndFrame by default; the gateway hangs
                # up once what the bot sent has played, so that silence is dead air before the
                # BYE on a phone line.
                audio_out_end_silence_secs=0,
            ),
        )
        context = LLMContext()
        aggregators = LLMContextAggregatorPair(context, user_params=user_params)
        canned = CannedReply(
            reply=reply,
            goodbye=goodbye,
            record=record,
            serializer=serializer,
            words=(args.reply_text or "").split(),
            word_ms=args.reply_word_ms,
        )
        # Registered before the recorder below: pipecat's own text, before any trimming.
        trimmer = HeardReplyTrimmer(aggregators.assistant(), enabled=args.heard_trim == "on")

        @aggregators.assistant().event_handler("on_assistant_turn_stopped")
        async def on_assistant_turn_stopped(aggregator, message):
            record.data["assistant_turns"].append(
                {"content": message.content, "interrupted": message.interrupted}
            )

        pipeline = Pipeline(
            [
                transport.input(),
                aggregators.user(),
                canned,
                transport.output(),
                trimmer,
                aggregators.assistant(),
            ]
        )
        task = PipelineTask(
            pipeline,
            params=PipelineParams(audio_out_sample_rate=AUDIO_OUT_RATE),
            enable_rtvi=False,
        )

        @transport.event_handler("on_client_disconnected")
        async def on_client_disconnected(transport, client):
            await task.cancel()

        try:
            await PipelineRunner(handle_sigint=False).run(task)
        finally:
            record.data["ontime_events"] = dict(getattr(serializer, "ontime_events", {}))
            record.data["assistant_messages"] = [
                m.get("content")
                for m in context.get_messages()
                if isinstance(m, dict) and m.get("role") == "assistant"
            ]
            record.write(args.record)

    @app.get("/healthz")
    async def healthz():
        return {"ok": True}

    return app


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--host", default=os.environ.get("BOT_HOST", "127.0.0.1"))
    p.add_argument("--port", type=int, default=int(os.environ.get("BOT_PORT", "8765")))
    p.add_argument("--turn", choices=["own", "ontime"], default=os.environ.get("BOT_TURN", "own"),
                   help="own: Silero VAD + Smart Turn v3 in the bot; ontime: the gateway's events")
    p.add_argument("--interruptions", choices=["on", "off"],
                   default=os.environ.get("BOT_INTERRUPTIONS", "on"))
    p.add_argument("--audio", choices=[f.value for f in OntimeAudioFormat],
                   default=os.environ.get("BOT_AUDIO", OntimeAudioFormat.MULAW_8K.value),
                   help="the media format the gateway streams: mulaw_8k (Twilio's) or l16_16k "
                        '(--ws-content-type "audio/l16;rate=16000")')
    p.add_argument("--goodbye", action="store_true", default=os.environ.get("BOT_GOODBYE") == "1",
                   help="after the first reply, say goodbye and close the WebSocket (1000)")
    p.add_argument("--reply", default=str(REPO / "gateway/assets/stub_reply.wav"))
    p.add_argument("--auto-silence", choices=["on", "off"], default="on",
                   help="pipecat's audio_out_auto_silence: stream silence between replies (its default)")
    p.add_argument("--reply-repeat", type=int, default=1, help="play the reply WAV N times over")
    p.add_argument("--goodbye-wav", default=None, help="default: the reply's first 3 s")
    p.add_argument("--reply-text", default=None,
                   help="the reply's words, one TTSTextFrame each (default: none, audio only)")
    p.add_argument("--reply-word-ms", type=int, default=200,
                   help="a word every N ms of the reply's audio (a multiple of 40 lands exactly)")
    p.add_argument("--heard-trim", choices=["on", "off"], default="on",
                   help="HeardReplyTrimmer: cut a barged-in reply's context message to what was heard")
    p.add_argument("--smart-turn-model", default=None,
                   help="default: .cache/models/smart-turn-v3.2-cpu.onnx, else pipecat's own")
    p.add_argument("--record", default=os.environ.get("BOT_RECORD"), help="JSON lines, one per call")
    p.add_argument("--log-level", default=os.environ.get("BOT_LOG_LEVEL", "INFO"))
    args = p.parse_args()
    logger.remove()
    logger.add(sys.stderr, level=args.log_level)
    uvicorn.run(make_app(args), host=args.host, port=args.port, log_level="warning", ws="websockets-sansio")


if __name__ == "__main__":
    main()
