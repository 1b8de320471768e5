"""ParamsMethod: every method with a params dataclass is made as ``XMethod(common, params)``,
positionally or by keyword, with its defaults when ``params`` is None, and derives its settings
when it is made, so that invalid parameters raise there."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from ctxleak.errors import ConfigError, CtxleakWarning
from ctxleak.methods.attacks.canary_method import CanaryMethod, CanaryParams
from ctxleak.methods.audit.method import AuditMethod, AuditParams
from ctxleak.methods.icl.method import ICLInfMethod, ICLInfParams
from ctxleak.methods.influence.method import InfluenceMethod, InfluenceParams
from ctxleak.methods.pii.method import ProbeMethod, ProbeParams
from ctxleak.methods.susceptibility.method import SusceptibilityMethod, SusceptibilityParams
from ctxleak.mitigations.cid import CIDConfig
from ctxleak.run.method import ParamsMethod
from ctxleak.run.options import RunOptions

METHODS = [(AuditMethod, AuditParams), (ICLInfMethod, ICLInfParams),
           (InfluenceMethod, InfluenceParams), (ProbeMethod, ProbeParams),
           (SusceptibilityMethod, SusceptibilityParams), (CanaryMethod, CanaryParams)]


@pytest.mark.parametrize(("method_class", "params_class"), METHODS)
def test_made_with_params_positionally_by_keyword_or_by_default(method_class, params_class):
    common = RunOptions(seed=3)
    made = [method_class(common, params_class()), method_class(common=common, params=params_class())]
    for method in made:
        assert method.common.seed == 3
        assert isinstance(method.params, params_class)
        assert method.params == made[0].params
    default = method_class()
    assert default.common == RunOptions()
    assert default.params == made[0].params


def test_settings_derived_when_made():
    assert ICLInfMethod(params=ICLInfParams(shots="1,2")).shots == [1, 2]
    assert ProbeMethod(params=ProbeParams(pii="phone")).settings["pii"] == ["phone"]
    # the temperature a served model measures influence at, when none was given
    served = RunOptions(server_url="http://127.0.0.1:9")
    with pytest.warns(CtxleakWarning, match="the default against a served model"):
        assert InfluenceMethod(served).params.temperatures == [1.0]
    assert InfluenceMethod().params.temperatures == [0.8]


def test_canary_default_decoding_is_the_command_s():
    assert CanaryMethod().params.decoding == CIDConfig(max_new_tokens=8, min_new_tokens=8)


@dataclass(frozen=True)
class _Params:
    size: int = 1


class _Sized(ParamsMethod[int, None, None, _Params]):
    name = "sized"
    params_type = _Params

    def derive(self) -> None:
        if self.params.size < 1:
            raise ConfigError(f"size must be >= 1, not {self.params.size}", param="size")
        self.sizes = list(range(self.params.size))


def test_invalid_params_raise_when_the_method_is_made():
    assert _Sized().sizes == [0]
    assert _Sized(None, _Params(3)).sizes == [0, 1, 2]
    with pytest.raises(ConfigError, match="size must be >= 1, not 0"):
        _Sized(params=_Params(0))
