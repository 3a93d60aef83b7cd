from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GenerateRequest(_message.Message):
    __slots__ = ("prompt", "prompt_token_ids", "max_tokens", "temperature", "top_p", "ignore_eos", "seed", "route", "request_id")
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    TOP_P_FIELD_NUMBER: _ClassVar[int]
    IGNORE_EOS_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    ROUTE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    prompt: str
    prompt_token_ids: _containers.RepeatedScalarFieldContainer[int]
    max_tokens: int
    temperature: float
    top_p: float
    ignore_eos: bool
    seed: int
    route: str
    request_id: str
    def __init__(self, prompt: _Optional[str] = ..., prompt_token_ids: _Optional[_Iterable[int]] = ..., max_tokens: _Optional[int] = ..., temperature: _Optional[float] = ..., top_p: _Optional[float] = ..., ignore_eos: _Optional[bool] = ..., seed: _Optional[int] = ..., route: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class TokenChunk(_message.Message):
    __slots__ = ("token_ids", "t", "finish_reason")
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    T_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    t: float
    finish_reason: str
    def __init__(self, token_ids: _Optional[_Iterable[int]] = ..., t: _Optional[float] = ..., finish_reason: _Optional[str] = ...) -> None: ...

class Summary(_message.Message):
    __slots__ = ("request_id", "token_ids", "text", "route", "ttft_s", "e2e_s", "itl_s", "prefill_worker", "decode_worker", "kv_transfer_bytes", "kv_transfer_s", "finish_reason", "num_prompt_tokens", "predicted_ttft_s", "decision_reason", "fallback", "token_times", "version")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    ROUTE_FIELD_NUMBER: _ClassVar[int]
    TTFT_S_FIELD_NUMBER: _ClassVar[int]
    E2E_S_FIELD_NUMBER: _ClassVar[int]
    ITL_S_FIELD_NUMBER: _ClassVar[int]
    PREFILL_WORKER_FIELD_NUMBER: _ClassVar[int]
    DECODE_WORKER_FIELD_NUMBER: _ClassVar[int]
    KV_TRANSFER_BYTES_FIELD_NUMBER: _ClassVar[int]
    KV_TRANSFER_S_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    NUM_PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PREDICTED_TTFT_S_FIELD_NUMBER: _ClassVar[int]
    DECISION_REASON_FIELD_NUMBER: _ClassVar[int]
    FALLBACK_FIELD_NUMBER: _ClassVar[int]
    TOKEN_TIMES_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    text: str
    route: str
    ttft_s: float
    e2e_s: float
    itl_s: _containers.RepeatedScalarFieldContainer[float]
    prefill_worker: str
    decode_worker: str
    kv_transfer_bytes: int
    kv_transfer_s: float
    finish_reason: str
    num_prompt_tokens: int
    predicted_ttft_s: float
    decision_reason: str
    fallback: str
    token_times: _containers.RepeatedScalarFieldContainer[float]
    version: int
    def __init__(self, request_id: _Optional[str] = ..., token_ids: _Optional[_Iterable[int]] = ..., text: _Optional[str] = ..., route: _Optional[str] = ..., ttft_s: _Optional[float] = ..., e2e_s: _Optional[float] = ..., itl_s: _Optional[_Iterable[float]] = ..., prefill_worker: _Optional[str] = ..., decode_worker: _Optional[str] = ..., kv_transfer_bytes: _Optional[int] = ..., kv_transfer_s: _Optional[float] = ..., finish_reason: _Optional[str] = ..., num_prompt_tokens: _Optional[int] = ..., predicted_ttft_s: _Optional[float] = ..., decision_reason: _Optional[str] = ..., fallback: _Optional[str] = ..., token_times: _Optional[_Iterable[float]] = ..., version: _Optional[int] = ...) -> None: ...

class GenerateResponse(_message.Message):
    __slots__ = ("tokens", "summary")
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    tokens: TokenChunk
    summary: Summary
    def __init__(self, tokens: _Optional[_Union[TokenChunk, _Mapping]] = ..., summary: _Optional[_Union[Summary, _Mapping]] = ...) -> None: ...

class HealthRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class HealthResponse(_message.Message):
    __slots__ = ("is_healthy", "num_healthy_workers", "detail")
    IS_HEALTHY_FIELD_NUMBER: _ClassVar[int]
    NUM_HEALTHY_WORKERS_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    is_healthy: bool
    num_healthy_workers: int
    detail: str
    def __init__(self, is_healthy: _Optional[bool] = ..., num_healthy_workers: _Optional[int] = ..., detail: _Optional[str] = ...) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class WorkerStatus(_message.Message):
    __slots__ = ("worker_id", "role", "healthy", "engine_id", "node_ip", "num_running", "num_waiting", "kv_cache_usage", "num_inflight", "num_queued_prefill_tokens")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    HEALTHY_FIELD_NUMBER: _ClassVar[int]
    ENGINE_ID_FIELD_NUMBER: _ClassVar[int]
    NODE_IP_FIELD_NUMBER: _ClassVar[int]
    NUM_RUNNING_FIELD_NUMBER: _ClassVar[int]
    NUM_WAITING_FIELD_NUMBER: _ClassVar[int]
    KV_CACHE_USAGE_FIELD_NUMBER: _ClassVar[int]
    NUM_INFLIGHT_FIELD_NUMBER: _ClassVar[int]
    NUM_QUEUED_PREFILL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    role: str
    healthy: bool
    engine_id: str
    node_ip: str
    num_running: int
    num_waiting: int
    kv_cache_usage: float
    num_inflight: int
    num_queued_prefill_tokens: int
    def __init__(self, worker_id: _Optional[str] = ..., role: _Optional[str] = ..., healthy: _Optional[bool] = ..., engine_id: _Optional[str] = ..., node_ip: _Optional[str] = ..., num_running: _Optional[int] = ..., num_waiting: _Optional[int] = ..., kv_cache_usage: _Optional[float] = ..., num_inflight: _Optional[int] = ..., num_queued_prefill_tokens: _Optional[int] = ...) -> None: ...

class LinkModel(_message.Message):
    __slots__ = ("prefill_worker", "decode_worker", "alpha_s", "beta_bytes_per_s", "num_updates")
    PREFILL_WORKER_FIELD_NUMBER: _ClassVar[int]
    DECODE_WORKER_FIELD_NUMBER: _ClassVar[int]
    ALPHA_S_FIELD_NUMBER: _ClassVar[int]
    BETA_BYTES_PER_S_FIELD_NUMBER: _ClassVar[int]
    NUM_UPDATES_FIELD_NUMBER: _ClassVar[int]
    prefill_worker: str
    decode_worker: str
    alpha_s: float
    beta_bytes_per_s: float
    num_updates: int
    def __init__(self, prefill_worker: _Optional[str] = ..., decode_worker: _Optional[str] = ..., alpha_s: _Optional[float] = ..., beta_bytes_per_s: _Optional[float] = ..., num_updates: _Optional[int] = ...) -> None: ...

class ModelInfo(_message.Message):
    __slots__ = ("id", "max_model_len", "vocab_size")
    ID_FIELD_NUMBER: _ClassVar[int]
    MAX_MODEL_LEN_FIELD_NUMBER: _ClassVar[int]
    VOCAB_SIZE_FIELD_NUMBER: _ClassVar[int]
    id: str
    max_model_len: int
    vocab_size: int
    def __init__(self, id: _Optional[str] = ..., max_model_len: _Optional[int] = ..., vocab_size: _Optional[int] = ...) -> None: ...

class StatusResponse(_message.Message):
    __slots__ = ("workers", "policy", "counters", "links", "model")
    class CountersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    COUNTERS_FIELD_NUMBER: _ClassVar[int]
    LINKS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    workers: _containers.RepeatedCompositeFieldContainer[WorkerStatus]
    policy: str
    counters: _containers.ScalarMap[str, int]
    links: _containers.RepeatedCompositeFieldContainer[LinkModel]
    model: ModelInfo
    def __init__(self, workers: _Optional[_Iterable[_Union[WorkerStatus, _Mapping]]] = ..., policy: _Optional[str] = ..., counters: _Optional[_Mapping[str, int]] = ..., links: _Optional[_Iterable[_Union[LinkModel, _Mapping]]] = ..., model: _Optional[_Union[ModelInfo, _Mapping]] = ...) -> None: ...
