"""Registries: decorators, lookups that suggest close names, and --registry_help."""

import pytest

from t2tlite import describe, registry
from tests.helpers import registry_sections


def test_lookup_suggests_close_names():
  with pytest.raises(registry.RegistryError) as error:
    registry.hparams("transformer_bse")
  assert "did you mean transformer_base" in str(error.value)
  with pytest.raises(registry.RegistryError, match="did you mean algorithmic_reverse"):
    registry.problem("algorithmic_revers")
  with pytest.raises(registry.RegistryError, match="unknown model 'transfomer'"):
    registry.model("transfomer")


def test_decorators_register_and_refuse_duplicates():
  reg = registry.Registry("thing")

  @reg.register()
  class MyThing:
    pass

  @reg.register("other_name")
  def some_function():
    return 1

  assert reg.get("my_thing") is MyThing and MyThing.registered_name == "my_thing"
  assert reg.get("other_name") is some_function
  with pytest.raises(registry.RegistryError, match="already registered"):
    reg.register("my_thing")(object)


def test_help_lists_all_three_kinds():
  sections = registry_sections(describe.registry_help())
  assert set(sections) == {"problems", "hparams sets", "models"}
  assert {"algorithmic_reverse", "algorithmic_copy"} <= set(sections["problems"])
  assert "transformer_base_posemb" in sections["hparams sets"]
  assert sections["models"].count("transformer") == 1  # Under models, and only there.
  assert "transformer" not in sections["problems"] + sections["hparams sets"]
  assert sorted(sections["hparams sets"]) == sorted(set(registry.HPARAMS.names()))


def test_usr_dir_registers_user_code(tmp_path):
  usr = tmp_path / "my_usr_dir"
  usr.mkdir()
  (usr / "__init__.py").write_text(
      "from t2tlite.registry import register_hparams\n"
      "from t2tlite.hparams.transformer import transformer_base\n"
      "@register_hparams()\n"
      "def my_usr_set():\n"
      "  return transformer_base().replace(d_ff=1000)\n")
  registry.import_usr_dir(str(usr))
  assert registry.hparams("my_usr_set").d_ff == 1000
  with pytest.raises(registry.RegistryError, match="no such directory"):
    registry.import_usr_dir(str(tmp_path / "missing"))
