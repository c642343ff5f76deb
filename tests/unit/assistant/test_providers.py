"""Providers by configuration: provider strings, the optional extras, keys from the environment."""

from __future__ import annotations

import importlib.util

import pytest

from fmdoctor.assistant.planner import OfflinePlanner
from fmdoctor.assistant.providers import describe, load_chat_model, parse_model
from fmdoctor.config import AgentSettings
from fmdoctor.engine.errors import ConfigError


def test_no_model_configured_means_the_offline_planner():
    assert isinstance(load_chat_model(AgentSettings()), OfflinePlanner)
    assert isinstance(load_chat_model(AgentSettings(model="offline")), OfflinePlanner)
    assert describe(load_chat_model(AgentSettings())) == "offline"


@pytest.mark.parametrize(
    "spec, message",
    [
        ("gpt-4o", "is not PROVIDER:MODEL"),
        ("openai:", "is not PROVIDER:MODEL"),
        ("bedrock:anthropic.claude-3-haiku-20240307-v1:0", "write bedrock_converse:MODEL_ID"),
        ("anthropic:claude-3-5-sonnet", "unsupported model provider 'anthropic'"),
    ],
)
def test_bad_provider_strings_are_config_errors(spec, message):
    with pytest.raises(ConfigError) as raised:
        parse_model(spec)
    assert message in raised.value.message and raised.value.exit_code == 3


def test_model_ids_with_colons_stay_whole():
    assert parse_model("bedrock_converse:anthropic.claude-3-5-sonnet-20240620-v1:0") == (
        "bedrock_converse", "anthropic.claude-3-5-sonnet-20240620-v1:0")
    assert parse_model("vllm:meta-llama/Llama-3.1-8B-Instruct") == ("openai", "meta-llama/Llama-3.1-8B-Instruct")


@pytest.mark.parametrize("provider, package, extra", [("bedrock_converse", "langchain_aws", "bedrock"),
                                                      ("openai", "langchain_openai", "openai"),
                                                      ("ollama", "langchain_ollama", "ollama")])
def test_a_missing_extra_says_what_to_install(monkeypatch, provider, package, extra):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == package else real(name, *a))
    with pytest.raises(ConfigError) as raised:
        load_chat_model(AgentSettings(model=f"{provider}:some-model"))
    assert f"needs the '{extra}' extra" in raised.value.message
    assert raised.value.hint == f"pip install 'fmdoctor[{extra}]'"


def test_openai_needs_a_key_unless_it_is_a_self_hosted_endpoint(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(ConfigError, match="no API key for openai: set OPENAI_API_KEY"):
        load_chat_model(AgentSettings(model="openai:gpt-4o-mini"))
    local = load_chat_model(AgentSettings(model="openai:qwen2.5", base_url="http://127.0.0.1:8000/v1"))
    assert local.openai_api_base == "http://127.0.0.1:8000/v1"
    assert local.openai_api_key.get_secret_value() == "not-needed"


def test_openai_key_comes_from_the_named_variable(monkeypatch):
    monkeypatch.setenv("VLLM_API_KEY", "sk-vllm-secret-000000000000")
    model = load_chat_model(AgentSettings(model="openai:llama", base_url="http://127.0.0.1:1/v1",
                                          api_key_env="VLLM_API_KEY", max_tokens=512, temperature=0.2))
    assert model.openai_api_key.get_secret_value() == "sk-vllm-secret-000000000000"
    assert (model.max_tokens, model.temperature, model.model_name) == (512, 0.2, "llama")
    assert "sk-vllm-secret" not in repr(model)


def test_bedrock_uses_the_converse_api_in_the_configured_region():
    model = load_chat_model(AgentSettings(model="bedrock_converse:anthropic.claude-3-haiku-20240307-v1:0",
                                          region="eu-central-1", max_tokens=1024))
    assert type(model).__name__ == "ChatBedrockConverse"
    assert (model.region_name, model.max_tokens, model.model_id) == (
        "eu-central-1", 1024, "anthropic.claude-3-haiku-20240307-v1:0")


def test_ollama_at_the_configured_host():
    model = load_chat_model(AgentSettings(model="ollama:llama3.1", base_url="http://127.0.0.1:11434", max_tokens=300))
    assert type(model).__name__ == "ChatOllama"
    assert (model.base_url, model.num_predict, model.model) == ("http://127.0.0.1:11434", 300, "llama3.1")


def test_redact_setting_must_be_valid_regexes():
    with pytest.raises(ValueError, match="not a regular expression"):
        AgentSettings(redact=["(unclosed"])
