"""Federated LoRA fine-tuning (``icml26 fed-lora``): Het-CPFLoRA and the federated LoRA baselines on Flower.

lora_math   split / SVD aggregation / stacking / zero-padding / OOD weights (pure torch)
strategies  one Flower ``Strategy`` per method (het-cpflora, fedit, flora, hetlora, ffa-lora, fedsa-lora, local) +
client rules
apps        ``client_app`` / ``server_app`` (Flower), the in-process grid, the round loop
model       the base LM once per worker, peft adapters, training / perplexity / generation
harness     ``Config`` and ``run`` (records of the command)
"""
