"""Training students on TRL, PEFT and accelerate: SFT corpora and adapters, online DAgger, GRPO.

Library entry points: ``corpus.build_corpus(CorpusConfig)`` and ``corpus.load_corpus(path)``;
``sft.train_sft(SFTTrainConfig) -> SFTResult``; ``dagger.train_dagger(DaggerConfig) -> DaggerResult``;
``report.write_training_report(...)``. ``pdbgym train ...`` (``train.commands``) drives them.
"""
