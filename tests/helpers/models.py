"""A tiny random llama (2 layers, hidden size 32, a 32-token vocabulary) for the RL tests."""

import torch
from transformers import LlamaConfig, LlamaForCausalLM

VOCAB = 32


def tiny_model(seed=0):
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64)
    return LlamaForCausalLM(config).eval()
