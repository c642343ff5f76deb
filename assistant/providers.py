"""The one module that names model providers. ``agent.model`` / ``--model`` is an ``init_chat_model``
provider string:

- ``bedrock_converse:MODEL_ID`` — Amazon Bedrock through the Converse API (extra ``bedrock``,
  langchain-aws); region from ``agent.region`` or the AWS default; ``agent.base_url`` is the bedrock-runtime
  endpoint when set (e.g. a VPC interface endpoint); credentials from the AWS chain.
- ``openai:MODEL`` — OpenAI or any OpenAI-compatible server (vLLM, a local one): ``agent.base_url`` (or
  ``OPENAI_BASE_URL``), key from the variable named by ``agent.api_key_env`` (default ``OPENAI_API_KEY``);
  a self-hosted server without a key gets a placeholder (extra ``openai``).
- ``ollama:MODEL`` — Ollama at ``agent.base_url`` (default its own localhost) (extra ``ollama``).
- unset or ``offline`` — the deterministic offline planner: no key, no network.

A missing extra, an unknown provider or a model that cannot be set up is a ConfigError (exit status 3).
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

from langchain_core.language_models import BaseChatModel

from fmdoctor.assistant.planner import OfflinePlanner
from fmdoctor.assistant.safety import Redactor
from fmdoctor.config import AgentSettings
from fmdoctor.engine.errors import ConfigError, FmdoctorError

OFFLINE = "offline"
# provider -> (python package, fmdoctor extra)
PROVIDERS = {
    "bedrock_converse": ("langchain_aws", "bedrock"),
    "openai": ("langchain_openai", "openai"),
    "ollama": ("langchain_ollama", "ollama"),
}
_ALIASES = {"bedrock": "bedrock_converse", "openai_compatible": "openai", "vllm": "openai"}


class ModelError(FmdoctorError):
    """The model provider failed (unreachable, rejected the key, throttled...)."""


def parse_model(spec: str) -> tuple[str, str]:
    provider, sep, model = spec.strip().partition(":")
    if spec.strip() == OFFLINE:
        return OFFLINE, ""
    if not sep or not model:
        raise ConfigError(f"model {spec!r} is not PROVIDER:MODEL",
                          hint=f"e.g. bedrock_converse:anthropic.claude-3-5-sonnet-20240620-v1:0, openai:gpt-4o-mini, "
                          f"ollama:llama3.1 ({', '.join(PROVIDERS)} or {OFFLINE})")
    provider = provider.lower().replace("-", "_")
    if provider == "bedrock":
        raise ConfigError("write bedrock_converse:MODEL_ID for Bedrock",
                          hint="fmdoctor uses the Converse API; 'bedrock:' selects LangChain's legacy Bedrock class")
    provider = _ALIASES.get(provider, provider)
    if provider not in PROVIDERS:
        raise ConfigError(f"unsupported model provider {provider!r}", hint=f"use one of {', '.join(PROVIDERS)}")
    return provider, model


def _options(provider: str, settings: AgentSettings) -> dict[str, Any]:
    common: dict[str, Any] = {"temperature": settings.temperature}
    if provider == "bedrock_converse":  # Converse and ConverseStream report usage on their own
        region = {"region_name": settings.region} if settings.region else {}
        endpoint = {"endpoint_url": settings.base_url} if settings.base_url else {}
        return common | {"max_tokens": settings.max_tokens} | region | endpoint
    if provider == "ollama":  # /api/chat's last line carries prompt_eval_count and eval_count on its own
        host = {"base_url": settings.base_url} if settings.base_url else {}
        return common | {"num_predict": settings.max_tokens} | host
    base_url = settings.base_url or os.environ.get("OPENAI_BASE_URL")
    key_env = settings.api_key_env or "OPENAI_API_KEY"
    key = os.environ.get(key_env)
    if not key and not base_url:
        raise ConfigError(f"no API key for openai: set {key_env}",
                          hint="or set agent.base_url for a self-hosted OpenAI-compatible server")
    # stream_usage: ask for the usage chunk (stream_options.include_usage) whatever the base URL; langchain-openai
    # asks only for OpenAI's own, so a vLLM or other compatible server's tokens were never counted.
    options = common | {"max_tokens": settings.max_tokens, "timeout": settings.timeout_s, "max_retries": 2,
                        "api_key": key or "not-needed", "stream_usage": True}
    return options | ({"base_url": base_url} if base_url else {})


def load_chat_model(settings: AgentSettings, spec: str | None = None) -> BaseChatModel:
    spec = spec or settings.model
    if not spec:
        return OfflinePlanner()
    provider, model = parse_model(spec)
    if provider == OFFLINE:
        return OfflinePlanner()
    package, extra = PROVIDERS[provider]
    if importlib.util.find_spec(package) is None:
        raise ConfigError(f"model provider {provider} needs the '{extra}' extra ({package.replace('_', '-')})",
                          hint=f"pip install 'fmdoctor[{extra}]'")
    from langchain.chat_models import init_chat_model

    try:
        return init_chat_model(model, model_provider=provider, **_options(provider, settings))
    except FmdoctorError:
        raise
    except Exception as exc:
        raise ConfigError(f"cannot set up model {spec}: {Redactor()(str(exc))}") from None


def aws_services(spec: str | None) -> tuple[str, ...]:
    """The AWS services a model provider calls (they must reach real AWS even when the cluster is moto's)."""
    return ("bedrock-runtime",) if spec and parse_model(spec)[0] == "bedrock_converse" else ()


def is_offline(model: BaseChatModel) -> bool:
    return isinstance(model, OfflinePlanner)


def describe(model: BaseChatModel) -> str:
    if is_offline(model):
        return OFFLINE
    name = getattr(model, "model_name", None) or getattr(model, "model_id", None) or getattr(model, "model", None)
    return f"{model._llm_type}:{name}" if name else model._llm_type
