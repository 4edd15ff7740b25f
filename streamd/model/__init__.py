"""Network code: streaming encoder, decoder, joiner, heads and checkpoint I/O."""

from .decoder import Decoder, DecoderState
from .encoder import EncoderCache, StreamingEncoder, chunk_attention_mask
from .joiner import Joiner
from .transducer import HeadOutputs, Transducer

__all__ = ["Decoder", "DecoderState", "EncoderCache", "StreamingEncoder", "chunk_attention_mask", "Joiner",
           "HeadOutputs", "Transducer"]
