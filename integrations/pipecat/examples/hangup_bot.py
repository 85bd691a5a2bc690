#!/usr/bin/env python3
"""A real pipecat 1.14 bot that hangs up its call through ontime's Twilio-compatible REST API.

FastAPI + uvicorn serve a WebSocket; each connection is one call, run as a pipecat pipeline on a
``FastAPIWebsocketTransport`` with pipecat's own ``TwilioFrameSerializer`` and
``auto_hang_up=True``, exactly as a pipecat bot behind Twilio is written. The only difference is
``base_url``: the serializer's REST calls go to the gateway's ``--api-listen`` instead of
api.twilio.com. ``--end-after`` seconds after the caller's first audio the bot ends its pipeline
(``EndTaskFrame``); pipecat then hangs the call up, unchanged.

How pipecat 1.14 hangs up (``pipecat/serializers/twilio.py``): when the ``EndFrame`` (or
``CancelFrame``) reaches the output transport, ``TwilioFrameSerializer.serialize`` calls
``_hang_up_call`` once, which POSTs the form ``Status=completed`` with aiohttp to
``{base_url.rstrip('/')}/2010-04-01/Accounts/{account_sid}/Calls/{call_sid}.json`` (the ``.json``
suffix included, ``base_url`` used verbatim as scheme + host) with HTTP Basic auth
``account_sid:auth_token``. A 200 logs ``Successfully terminated Twilio call {call_sid}``; a 404
with code 20404 is taken as "already ended"; anything else is logged as an error. The output
transport awaits that POST before it closes the WebSocket (input and output share one client,
and the output's close comes last), so the API request reaches the gateway first.

The call's SIDs come from the ``start`` message (``callSid``, ``accountSid``): ontime sends the
call's API CallSid and its configured account SID there, so the bot acts on its own call with no
per-call configuration. The auth token comes from ``TWILIO_AUTH_TOKEN``, as pipecat's own runner
reads it.

Each finished call appends one JSON line to ``--record FILE`` (the SIDs it used, when the caller's
audio started and when the bot ended its pipeline).

    TWILIO_AUTH_TOKEN=... python hangup_bot.py --port 8766 --api-base-url http://127.0.0.1:8080
    target/release/ontime-gateway --agent ws://127.0.0.1:8766/media-stream --api-listen 127.0.0.1:8080 ...
"""

import argparse
import asyncio
import json
import os
import sys
import time

import uvicorn
from fastapi import FastAPI, WebSocket
from loguru import logger
from pipecat.frames.frames import EndTaskFrame, Frame, InputAudioRawFrame
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.runner import PipelineRunner
from pipecat.pipeline.task import PipelineParams, PipelineTask
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.serializers.twilio import TwilioFrameSerializer
from pipecat.transports.websocket.fastapi import (
    FastAPIWebsocketParams,
    FastAPIWebsocketTransport,
)


class EndAfter(FrameProcessor):
    """Passes every frame on; ``secs`` after the first caller audio, ends the pipeline."""

    def __init__(self, *, secs: float, record: dict):
        super().__init__()
        self._secs = secs
        self._record = record
        self._timer: asyncio.Task | None = None

    async def _end_later(self):
        await asyncio.sleep(self._secs)
        self._record["ended_pipeline_unix"] = time.time()
        logger.info("hangup_bot: ending the pipeline")
        await self.push_frame(EndTaskFrame(), FrameDirection.UPSTREAM)

    async def process_frame(self, frame: Frame, direction: FrameDirection):
        await super().process_frame(frame, direction)
        await self.push_frame(frame, direction)
        if isinstance(frame, InputAudioRawFrame) and self._timer is None:
            self._record["first_audio_unix"] = time.time()
            self._timer = self.create_task(self._end_later())


async def read_start(websocket: WebSocket) -> dict:
    """The ``start`` message's ``start`` object (``connected`` comes first and is skipped)."""
    for _ in range(2):
        message = json.loads(await websocket.receive_text())
        if message.get("event") == "start":
            return message["start"]
    raise ValueError("no start message in the first two")


def make_app(args) -> FastAPI:
    app = FastAPI()
    auth_token = os.environ["TWILIO_AUTH_TOKEN"]

    @app.websocket("/{path:path}")
    async def media_stream(websocket: WebSocket, path: str):
        await websocket.accept()
        start = await read_start(websocket)
        record = {
            "call_sid": start.get("callSid"),
            "account_sid": start.get("accountSid"),
            "stream_sid": start.get("streamSid"),
            "connected_unix": time.time(),
        }
        serializer = TwilioFrameSerializer(
            stream_sid=start["streamSid"],
            call_sid=start["callSid"],
            account_sid=start["accountSid"],
            auth_token=auth_token,
            base_url=args.api_base_url,
            params=TwilioFrameSerializer.InputParams(auto_hang_up=True),
        )
        transport = FastAPIWebsocketTransport(
            websocket=websocket,
            params=FastAPIWebsocketParams(
                audio_in_enabled=True,
                audio_out_enabled=True,
                add_wav_header=False,
                serializer=serializer,
            ),
        )
        pipeline = Pipeline(
            [transport.input(), EndAfter(secs=args.end_after, record=record), transport.output()]
        )
        task = PipelineTask(pipeline, params=PipelineParams(), enable_rtvi=False)

        @transport.event_handler("on_client_disconnected")
        async def on_client_disconnected(transport, client):
            await task.cancel()

        try:
            await PipelineRunner(handle_sigint=False).run(task)
        finally:
            record["ended_unix"] = time.time()
            line = json.dumps(record)
            logger.info(f"call record: {line}")
            if args.record:
                with open(args.record, "a") as f:
                    f.write(line + "\n")

    @app.get("/healthz")
    async def healthz():
        return {"ok": True}

    return app


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8766)
    p.add_argument("--api-base-url", required=True,
                   help="the gateway's API root (scheme + host), pipecat's base_url")
    p.add_argument("--end-after", type=float, default=3.0,
                   help="seconds after the caller's first audio until the bot ends its pipeline")
    p.add_argument("--record", default=None, help="JSON lines, one per call")
    p.add_argument("--log-level", default="INFO")
    args = p.parse_args()
    logger.remove()
    logger.add(sys.stderr, level=args.log_level)
    uvicorn.run(make_app(args), host=args.host, port=args.port, log_level="warning", ws="websockets-sansio")


if __name__ == "__main__":
    main()
