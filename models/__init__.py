"""Neural models: visual VQ tokenizer, CLIP teacher, audio/video embedder, MoE backbone, MI critics."""
