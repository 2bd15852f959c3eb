"""Theory papers as measurement tools: deep Jacobian spectra (``jacobian-spectrum``) and
layerwise equivariance (``equivariance``)."""
