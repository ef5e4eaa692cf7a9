"""graph_passes.config: QuantConfig's checks and the --include / --exclude name filter."""

from __future__ import annotations

import pytest

from graph_passes import QuantConfig, UserError


def test_filter_reasons_quote_patterns_as_typed_in_a_shell():
    """The reason names the regex so that it can be pasted back on the command line: no doubled backslashes."""
    config = QuantConfig(exclude=(r"model\.22", "conv"))
    assert config.name_filter_reason("/model.22/cv2/Conv") == r"excluded by --exclude 'model\.22'"
    assert config.name_filter_reason("/model.3/conv/Conv") == "excluded by --exclude conv"
    assert config.name_filter_reason("/model.3/Mul") is None
    with pytest.raises(UserError, match=r"^--include 'a\\\.\(' is not a valid regular expression"):
        QuantConfig(include=(r"a\.(",))
