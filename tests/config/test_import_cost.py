"""The parts without I/O import no pika: reading a config, routing, selectors and the AMQP codecs
stay cheap to import (``rtroute config check``, the Spark job, the library), and the layering
of DESIGN.md (routing/ and selector/ never reach amqp/) holds at import time too."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

PIKA_FREE = [
    "rtroute",
    "rtroute.config.rtroute_toml",
    "rtroute.config.lines",
    "rtroute.config.divert",
    "rtroute.config.shovel",
    "rtroute.routing",
    "rtroute.selector",
    "rtroute.amqp",
    "rtroute.amqp.field_table",
    "rtroute.amqp.content_header",
]


def _imported_after(module: str, code: str = "") -> str:
    """What ``python -c`` prints after importing ``module`` in a fresh interpreter."""
    done = subprocess.run([sys.executable, "-c", f"import sys, {module}\n{code}"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("module", PIKA_FREE)
def test_importing_imports_no_pika(module):
    out = _imported_after(module, "print(sorted(m for m in sys.modules if m.split('.')[0] "
                                  "== 'pika'))")
    assert out.strip() == "[]", f"import {module} pulled in pika: {out}"


def test_the_amqp_package_loads_a_name_from_its_module_when_asked():
    out = _imported_after("rtroute.amqp", textwrap.dedent("""
        import rtroute.amqp as amqp
        assert "rtroute.amqp.confirm_window" not in sys.modules
        from rtroute.amqp import ConfirmWindow
        from rtroute.amqp.confirm_window import ConfirmWindow as defined
        assert ConfirmWindow is defined
        assert all(getattr(amqp, name) is not None for name in amqp.__all__)
        assert set(amqp.__all__) <= set(dir(amqp))
        print("ok")
    """))
    assert out.strip() == "ok"


def test_an_unknown_name_of_the_amqp_package_is_an_attribute_error():
    import rtroute.amqp

    with pytest.raises(AttributeError, match="no_such_name"):
        rtroute.amqp.no_such_name  # noqa: B018
    with pytest.raises(ImportError):
        from rtroute.amqp import no_such_name  # noqa: F401
