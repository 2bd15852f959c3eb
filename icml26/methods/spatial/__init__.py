"""Spatial reasoning for vision-language models: GeoThinker's Spatial-Grounded Fusion (``sgf``),
the rendered VSI-style benchmark (``bench``), its VSI-Bench scorer (``scoring``) and the CPU
experiment (``experiment``). GeoThinker, arXiv 2602.06037; code Li-Hao-yuan/GeoThinker."""
