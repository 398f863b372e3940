"""The secrets a URL can carry, found by one rule for every URL-shaped knob and argument.

A URL holds a credential in two places: the password of its userinfo (scheme://user:PASSWORD@host) and a query
parameter named like one (?password=, ?sslpassword=, ?token=, ?key=, ?secret=, ?api_key=..., in any case, the name
URL-encoded or not: ?pass%77ord=). libpq reads both (postgresql://user@host/db?password=... connects as surely as
user:password@), and so does every HTTP client, so a knob whose value carries one is refused (the password belongs
in PGPASSWORD, a .pgpass file or secrets.env), its problem line shows it redacted, and evaluate.wrap searches for
such a value wherever one is in the environment or config.env. Standard library only: utils.secrets uses it before
any virtual environment exists.
"""

from __future__ import annotations

import re
from urllib.parse import unquote, unquote_plus

URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s\"'<>`]*")
KEY_NAME = re.compile(r"(?:.*[_-])?(?:api)?key|pwd")  # key, api_key, apikey, x-key; not sslkey (a file's path)
SECRET_WORDS = ("password", "passwd", "secret", "token")  # password, sslpassword, access_token, client_secret
REDACTED = "***"


def secret_name(name: str) -> bool:
    """Whether a query parameter of this name (as written, perhaps URL-encoded) carries a credential."""
    plain = unquote_plus(name).strip().lower()
    return any(word in plain for word in SECRET_WORDS) or KEY_NAME.fullmatch(plain) is not None


def secrets_in(text: str) -> list[tuple[str, str]]:
    """(where in the URL, the value as written) for each credential of each URL in text."""
    found = []
    for url in URL.findall(text):
        rest = url.split("://", 1)[1]
        authority = re.split(r"[/?#]", rest, maxsplit=1)[0]  # where libpq and urlsplit look for user:password@
        userinfo = authority.rpartition("@")[0]
        if ":" in userinfo and userinfo.split(":", 1)[1]:
            found.append(("the password before @", userinfo.split(":", 1)[1]))
        query = rest.partition("?")[2].partition("#")[0]
        for pair in filter(None, query.split("&")):
            name, _, value = pair.partition("=")
            if value and secret_name(name):
                found.append((f"the query parameter {unquote_plus(name).strip().lower()}=", value))
    return found


def values_in(text: str) -> list[str]:
    """Each credential of the URLs in text, as written and as decoded (a program sends the decoded one)."""
    return list(dict.fromkeys(form for _, value in secrets_in(text) for form in (value, unquote(value),
                                                                                  unquote_plus(value))))


def redact(text: str) -> str:
    """text with every credential of its URLs replaced by ***, so that a line may name the URL."""
    for value in sorted({value for _, value in secrets_in(text)}, key=len, reverse=True):
        text = text.replace(value, REDACTED)
    return text
