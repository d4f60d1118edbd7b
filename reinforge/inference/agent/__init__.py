"""Agent loops over the engine: single-turn, tools and interactions, text environments (docs/agents.md)."""

from reinforge.inference.agent import loops  # noqa: F401  (registers the built-in loops)
from reinforge.inference.agent.base import (
    AGENT_LOOP_REGISTRY,
    AgentContext,
    AgentLoopBase,
    AgentOutput,
    AgentRow,
    Conversation,
    message_delta_text,
    register_agent_loop,
)
from reinforge.inference.agent.runner import AgentRunner, check_agent_config, check_agent_rows, load_agent_loops

__all__ = ["AGENT_LOOP_REGISTRY", "AgentContext", "AgentLoopBase", "AgentOutput", "AgentRow", "AgentRunner",
           "Conversation", "check_agent_config", "check_agent_rows", "load_agent_loops", "message_delta_text", "register_agent_loop"]
