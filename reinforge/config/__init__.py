"""Config: the schema (schema.py), loading and overrides (loading.py), checks and batch arithmetic
(validate.py), the built-in quickstart preset (quickstart.py), and the report of settings that
have no effect in a run (unused.py)."""

from reinforge.config.derived import batch_arithmetic, wants_sum_pi_squared
from reinforge.config.loading import all_keys, field_doc, load_config, parse_overrides, to_dict
from reinforge.config.schema import Config
from reinforge.config.unused import unused_settings

__all__ = ["Config", "all_keys", "batch_arithmetic", "field_doc", "load_config", "parse_overrides", "to_dict", "unused_settings",
           "wants_sum_pi_squared"]
