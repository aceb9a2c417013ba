import importlib

import pytest

from rtroute.core import reference


def _native():
    try:
        return importlib.import_module("rtroute.core._native")
    except ImportError:
        return None


NATIVE = _native()
IMPLS = [pytest.param(reference, id="reference")]
IMPLS.append(
    pytest.param(NATIVE, id="native")
    if NATIVE
    else pytest.param(None, id="native", marks=pytest.mark.skip(reason="extension not built"))
)


@pytest.fixture(params=IMPLS)
def impl(request):
    """The module providing ReverseMatcher/ForwardMatcher: native and reference alike."""
    return request.param
