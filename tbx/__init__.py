"""tbx: evaluate tool-using LLM agents by the database state they leave behind.

The same verdict serves evaluation, probing and the GRPO training reward.
"""

__version__ = "0.1.0"
