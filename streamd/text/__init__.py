"""Text in the model's spoken form, shared by training and the runtime: :mod:`.numbers` (numbers spelled
out) and :mod:`.normalize` (written English -> spoken form).  Pure functions; no torch, no I/O."""
