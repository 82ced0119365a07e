"""Model package: the Llama-architecture decoder, its loaders and its tokenizer."""
from scheduler_core.model.config import ModelConfig
from scheduler_core.model.llama import ForwardBatch, LlamaModel
from scheduler_core.model.loader import LoadedModel, load_model

__all__ = ["ForwardBatch", "LlamaModel", "LoadedModel", "ModelConfig", "load_model"]
