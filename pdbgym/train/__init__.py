"""Training students on TRL, PEFT and accelerate: SFT corpora and adapters, online DAgger, GRPO.

Sub-packages: ``corpus``, ``sft``, ``dagger``, ``grpo``, ``experiment`` (one versioned experiment end to
end), ``demo`` (one experiment file, shipped in the package); shared: ``checkpoints``, ``report``, ``errors``
(``TrainError``, ``DaggerError``), accelerate configs in ``configs/``.

Library entry points: ``corpus.build.build_corpus(CorpusConfig)`` and ``corpus.build.load_corpus(path)``;
``sft.trainer.train_sft(SFTTrainConfig) -> SFTResult``; ``dagger.loop.train_dagger(DaggerConfig) ->
DaggerResult``; ``grpo.run.train_grpo(GRPORunConfig)``; ``report.write_training_report(...)``.
``pdbgym train ...`` (``train.commands``) drives them.
"""
