"""Speech-text modelling: MoST's modality-aware MoE (``mamoe``), discrete speech units, a Griffin-Lim
unit-to-waveform decoder, word error rate and the pocketsphinx reference recognizer."""
