"""OpenForge: reinforcement learning for LLM agents inside their real harnesses."""

__version__ = "0.1.0"
