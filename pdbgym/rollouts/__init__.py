"""pdbgym.rollouts: the teacher-cache record format and everything that reads or writes it.

record.py (RolloutRecord, LogprobSemantics, CacheFormatError), cache.py (write_cache, append_records,
read_cache, iter_cache, default_cache_dir), validate.py (validate_record, validate_cache,
load_validated_cache), parquet.py (write_parquet, read_parquet), convert.py (convert_cache),
summary.py (summarize), synthetic.py (make_synthetic_cache). Format: docs/cache-format.md.
"""
