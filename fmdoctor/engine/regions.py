"""Region names checked offline against botocore's own endpoint data, so a typo ('us-weast-2') is one clear
message with the regions close to it, not a connection error after every call's retries.

The data is the ``endpoints`` model botocore ships (the partitions and their regions); a region newer than
the installed botocore is not in it, and the message says to upgrade. With a custom endpoint URL (moto,
LocalStack, a VPC endpoint) the name is not checked: such endpoints serve whatever region they are given.
"""

from __future__ import annotations

from functools import lru_cache

import botocore
from botocore.loaders import Loader

from fmdoctor.engine.errors import ConfigError
from fmdoctor.words import suggest


@lru_cache(maxsize=1)
def known_regions() -> frozenset[str]:
    """Every region of every partition botocore knows (aws, aws-cn, aws-us-gov, ...)."""
    partitions = Loader().load_data("endpoints").get("partitions", [])
    return frozenset(region for partition in partitions for region in partition.get("regions", {}))


def check_region(region: str | None, where: str = "--region") -> None:
    """Raise ConfigError naming ``where`` the region came from when botocore knows no such region."""
    if not region or region in known_regions():
        return
    close = suggest(region, sorted(known_regions()))
    known = f"did you mean {', '.join(close)}?" if close else "regions look like us-west-2 or eu-central-1;"
    raise ConfigError(f"unknown region {region!r} ({where})",
                      hint=f"{known} a region newer than botocore {botocore.__version__} needs 'pip install -U boto3'")
