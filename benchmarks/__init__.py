"""flytune_nb's benchmark suite: one script per question, each runnable on any GPU as ``python -m benchmarks NAME``
(``python -m benchmarks`` lists them; ``--help`` on each says what it compares). See benchmarks/README.md."""
