"""One module per static fused op; each exports ``ENTRY`` (FlashAttnBackward:
``ENTRY_Q``/``ENTRY_K``/``ENTRY_V``). The registry lists them in
``compiler.registry.registry.ENTRY_MODULES``."""
