"""A cheap timestamp parser for botocore's response parsers.

botocore's default (``botocore.utils.parse_timestamp``) builds a new ``dateutil.tz.tzlocal()`` for every value
and sends ISO strings through ``dateutil.parser``: at a CloudWatch sweep of 16,000 series or a DescribeInstances
page of 250 p5 nodes (an attach time per interface) that was a quarter of the client's CPU. The two forms AWS
sends are parsed directly here, into timezone-aware UTC datetimes: epoch seconds (the CBOR and JSON protocols)
and ``YYYY-MM-DDTHH:MM:SS[.ffffff]Z`` (the query and EC2 protocols). Anything else goes to botocore's parser.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any

from botocore.utils import parse_timestamp as botocore_parse_timestamp
from dateutil.tz import tzutc

UTC = tzutc()  # what botocore's parser gives an ISO string ending in Z (dateutil's UTC is a singleton)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
ISO_UTC = re.compile(r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d{1,6}))?Z")


def parse_timestamp(value: Any) -> datetime:
    """The instant ``value`` names, as an aware datetime in UTC."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return EPOCH + timedelta(seconds=value)  # rounds to the microsecond as fromtimestamp does
    if isinstance(value, str):
        match = ISO_UTC.fullmatch(value)
        if match:
            year, month, day, hour, minute, second, fraction = match.groups()
            return datetime(int(year), int(month), int(day), int(hour), int(minute), int(second),
                            int((fraction or "0").ljust(6, "0")), tzinfo=UTC)
    return botocore_parse_timestamp(value)  # type: ignore[no-any-return]


def install(botocore_session: Any) -> None:
    """Make every client this botocore session creates from now on parse timestamps with :func:`parse_timestamp`."""
    botocore_session.get_component("response_parser_factory").set_parser_defaults(timestamp_parser=parse_timestamp)
