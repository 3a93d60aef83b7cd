"""A deployment stand-in for the front doors' unit tests: no Ray, no engines.

`FakeBackend` validates like the router (vocabulary, length), "tokenizes" text as UTF-8 bytes
and answers with a fixed byte sequence that includes a two-byte character, so streamed text
must be reassembled across tokens.
"""
from __future__ import annotations

import asyncio
import time

from pd_serve.frontend.errors import OverloadedError
from pd_serve.frontend.settings import ModelInfo
from pd_serve.request import GenerateRequest, GenerateResult, InvalidRequestError, check_against_model

OUTPUT_TEXT = "ok é done"
OUTPUT_IDS = list(OUTPUT_TEXT.encode())  # "é" is two tokens: 0xC3 0xA9


class ByteTokenizer:
    """Token id = byte value (ids >= 256 decode to nothing)."""

    def encode(self, text: str) -> list[int]:
        return list(text.encode())

    def decode(self, token_ids, skip_special_tokens: bool = True) -> str:
        return bytes(t for t in token_ids if t < 256).decode("utf-8", errors="replace")


class FakeBackend:
    def __init__(self, vocab_size: int = 300, max_model_len: int = 64, delay_s: float = 0.0,
                 max_inflight_requests: int = 100):
        self.model = ModelInfo(id="fake-model", root="/models/fake", tokenizer="fake",
                               max_model_len=max_model_len, vocab_size=vocab_size)
        self.tokenizer = ByteTokenizer()
        self.delay_s = delay_s
        self.max_inflight_requests = max_inflight_requests
        self.num_inflight = 0
        self.requests: list[GenerateRequest] = []
        self.num_cancelled = 0
        self.fail_after_tokens: Exception | None = None

    async def stream(self, req: GenerateRequest):
        if self.num_inflight >= self.max_inflight_requests:
            raise OverloadedError(f"{self.num_inflight} requests in flight, the limit is "
                                  f"{self.max_inflight_requests}")
        self.requests.append(req)
        ids = list(req.prompt_token_ids) if req.prompt_token_ids else self.tokenizer.encode(req.prompt)
        if not ids:
            raise InvalidRequestError("prompt is empty after tokenization")
        check_against_model(ids, req.max_tokens, self.model.vocab_size, self.model.max_model_len)
        out = (OUTPUT_IDS * req.max_tokens)[:req.max_tokens]
        self.num_inflight += 1
        t0, times, done = time.time(), [], False
        try:
            for i, tok in enumerate(out):
                if self.delay_s:
                    await asyncio.sleep(self.delay_s)
                if self.fail_after_tokens is not None and i == 2:
                    raise self.fail_after_tokens
                times.append(time.time())
                last = i == len(out) - 1
                yield {"type": "token", "token_ids": [tok], "t": times[-1],
                       "finish_reason": "length" if last else None}
            result = GenerateResult(
                request_id=req.request_id or "fake-1", token_ids=out,
                text=self.tokenizer.decode(out), route="colocated", ttft_s=times[0] - t0,
                e2e_s=time.time() - t0, itl_s=[b - a for a, b in zip(times, times[1:])],
                prefill_worker=None, decode_worker="both-0", kv_transfer_bytes=0,
                kv_transfer_s=None, finish_reason="length", num_prompt_tokens=len(ids),
                predicted_ttft_s=0.01, decision_reason="fake", token_times=times)
            done = True
            yield {"type": "result", "result": result.to_dict()}
        finally:
            self.num_inflight -= 1
            if not done:
                self.num_cancelled += 1

    async def status(self) -> dict:
        return {"workers": {"both-0": {"role": "both", "healthy": True, "engine_id": "e0",
                                       "node_ip": "127.0.0.1", "inflight": self.num_inflight,
                                       "load": {"num_running": 1, "num_waiting": 2,
                                                "kv_cache_usage": 0.25}}},
                "policy": "length_threshold", "counters": {"requests_finished": 3}}

    async def health(self) -> dict:
        return {"is_healthy": True, "num_healthy_workers": 1, "detail": "1/1 workers healthy"}

    async def metrics_text(self) -> str:
        return "# TYPE pd_serve:route_fallbacks_total counter\npd_serve:route_fallbacks_total 0.0\n"
