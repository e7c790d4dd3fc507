"""Secrets in what agents write: found before anything is stored, then masked, refused or kept.

The patterns are detect-secrets' (its regex plugins' `denylist`s, used as they ship, each match's
secret group if it has one), extended where it misses formats agents paste today: newer token
formats (GitHub fine-grained, Anthropic, OpenAI project keys, Google API keys, Hugging Face, ...),
a password or key given by name (`password=...`, `DB_PASSWORD: ...`, "the password is ..."),
`Authorization: Bearer ...`, and a private key's whole PEM block (detect-secrets finds only its
header). Its entropy plugins are left out: on prose they flag ordinary words and identifiers
(docs/EVAL.md, "Secrets", measures what is kept).

`HM_REDACT` picks what a write does with what is found (`Redactor`): `mask` (the default)
replaces each secret with `[REDACTED:<kind>]` and the answer reports the count and kinds;
`refuse` fails the write (Unprocessable, 422, naming the field, kind and offset; nothing written);
`off` stores the text as given. A refusal never repeats the secret.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from detect_secrets.plugins import (
    artifactory,
    aws,
    azure_storage_key,
    basic_auth,
    cloudant,
    discord,
    github_token,
    gitlab_token,
    ibm_cloud_iam,
    ibm_cos_hmac,
    jwt,
    keyword,
    mailchimp,
    npm,
    openai,
    private_key,
    pypi_token,
    sendgrid,
    slack,
    softlayer,
    square_oauth,
    stripe,
    telegram_token,
    twilio,
)

from hypermnesia.errors import Unprocessable
from hypermnesia.settings import RedactMode

__all__ = [
    "MODES",
    "Finding",
    "Redaction",
    "Redactor",
    "RedactMode",
    "find",
    "mask",
    "masked",
]

MODES: tuple[RedactMode, ...] = ("mask", "refuse", "off")


@dataclass(frozen=True)
class Finding:
    kind: str
    start: int
    end: int


@dataclass(frozen=True)
class _Rule:
    kind: str
    pattern: re.Pattern[str]
    # A catch-all rule (a secret named by its label): where it overlaps a rule for a known
    # format, the known format names the finding.
    generic: bool = False
    check: Any = None  # an extra test of the matched text (detect-secrets' JWT validity)
    # The group holding the secret; None: the first group that matched, else the whole match.
    group: int | None = None
    # Matches only after a label word (`_LABEL_WORDS`: key, token, pass...), so a text without one
    # skips it: these patterns have no literal to anchor on and are the slowest.
    needs_label: bool = False


def _rules_of(kind: str, patterns: Iterable[re.Pattern[str]], **extra: Any) -> list[_Rule]:
    return [_Rule(kind, p, **extra) for p in patterns]


def _ours(kind: str, pattern: str, flags: int = 0, **extra: Any) -> _Rule:
    return _Rule(kind, re.compile(pattern, flags), **extra)


# A password or key given by its name. The value must look like one (a digit or a symbol beside
# letters, at least 6 characters), so that "password: forgotten" or "token: the blue one" is prose.
_NAMED = (
    r"(?:[A-Za-z0-9]+[_.-])*(?:password|passwd|passphrase|pwd|pass|secret|secret[_-]?key|api[_-]?key|"
    r"apikey|access[_-]?key|auth[_-]?token|access[_-]?token|refresh[_-]?token|client[_-]?secret|token)"
)
# A value that is itself a label (`SECRET: aws_secret_access_key = ...`) is not the secret: the
# label's own value is.
_VALUE = (
    r"""["'`]?(?!""" + _NAMED + r"""["'`]?\s*(?:=|:=|:|=>))"""
    r"""((?=[^\s"'`,;]*[0-9!#$%&*+/<=>?@^_~-])(?=[^\s"'`,;]*[A-Za-z])[^\s"'`,;]{6,})"""
)

RULES: tuple[_Rule, ...] = (
    # detect-secrets' regex plugins, as they ship.
    *_rules_of("aws_access_key", aws.AWSKeyDetector.denylist[:1]),
    *_rules_of("aws_secret_key", aws.AWSKeyDetector.denylist[1:]),
    *_rules_of("artifactory", artifactory.ArtifactoryDetector.denylist),
    *_rules_of("azure_storage_key", azure_storage_key.AzureStorageKeyDetector.denylist),
    *_rules_of("url_password", basic_auth.BasicAuthDetector.denylist),
    *_rules_of("cloudant", cloudant.CloudantDetector.denylist[:2], needs_label=True),
    *_rules_of("cloudant", cloudant.CloudantDetector.denylist[2:]),
    *_rules_of("discord_bot_token", discord.DiscordBotTokenDetector.denylist),
    *_rules_of("github_token", github_token.GitHubTokenDetector.denylist),
    *_rules_of("gitlab_token", gitlab_token.GitLabTokenDetector.denylist),
    *_rules_of("ibm_cloud_iam_key", ibm_cloud_iam.IbmCloudIamDetector.denylist, needs_label=True),
    *_rules_of("ibm_cos_hmac", ibm_cos_hmac.IbmCosHmacDetector.denylist, needs_label=True),
    *_rules_of("jwt", jwt.JwtTokenDetector.denylist, check=jwt.JwtTokenDetector.is_formally_valid),
    *_rules_of("mailchimp_key", mailchimp.MailchimpDetector.denylist),
    *_rules_of("npm_token", npm.NpmDetector.denylist),
    *_rules_of("openai_key", openai.OpenAIDetector.denylist),
    *_rules_of("private_key", private_key.PrivateKeyDetector.denylist),
    *_rules_of("pypi_token", pypi_token.PypiTokenDetector.denylist),
    *_rules_of("sendgrid_key", sendgrid.SendGridDetector.denylist),
    *_rules_of("slack_token", slack.SlackDetector.denylist[:1]),
    *_rules_of("slack_webhook", slack.SlackDetector.denylist[1:]),
    *_rules_of("softlayer", softlayer.SoftlayerDetector.denylist[:1], needs_label=True),
    *_rules_of("softlayer", softlayer.SoftlayerDetector.denylist[1:]),
    *_rules_of("square_oauth_secret", square_oauth.SquareOAuthDetector.denylist),
    *_rules_of("stripe_key", stripe.StripeDetector.denylist),
    *_rules_of("telegram_bot_token", telegram_token.TelegramBotTokenDetector.denylist),
    *_rules_of("twilio_key", twilio.TwilioKeyDetector.denylist),
    # Its keyword plugin in the quoted forms it uses for code (`api_key = "..."`), each with the
    # group its plugin reads the secret from.
    *(
        _Rule("named_secret", pattern, generic=True, group=group)
        for pattern, group in keyword.QUOTES_REQUIRED_DENYLIST_REGEX_TO_GROUP.items()
    ),
    # Extensions: formats detect-secrets 1.5 does not know.
    _ours("github_token", r"\bgithub_pat_[A-Za-z0-9]{22}_[A-Za-z0-9]{59}"),
    _ours("anthropic_key", r"\bsk-ant-(?:api|admin|oat)\d\d-[A-Za-z0-9_-]{32,}"),
    _ours("openai_key", r"\bsk-(?:proj|svcacct|admin)-[A-Za-z0-9_-]{40,}"),
    _ours("google_api_key", r"\bAIza[0-9A-Za-z_-]{35}"),
    _ours("google_oauth_secret", r"\bGOCSPX-[A-Za-z0-9_-]{28}"),
    _ours("npm_token", r"\bnpm_[A-Za-z0-9]{36}"),
    _ours("huggingface_token", r"\bhf_[A-Za-z0-9]{34,}"),
    _ours("digitalocean_token", r"\bdo[por]_v1_[a-f0-9]{64}"),
    _ours("shopify_token", r"\bshp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}"),
    _ours("slack_token", r"\bxapp-\d-[A-Z0-9]+-\d+-[a-z0-9]+"),
    _ours("azure_client_secret", r"(?<![A-Za-z0-9_~.-])[A-Za-z0-9_~.-]{3}\dQ~[A-Za-z0-9_~.-]{31,34}"),
    _ours("azure_shared_access_key", r"(?i)\bSharedAccessKey\s*=\s*([A-Za-z0-9+/]{42,44}={0,2})"),
    _ours("azure_sas_signature", r"[?&]sig=([A-Za-z0-9%+/]{40,}(?:%3D|=)*)"),
    _ours("bearer_token", r"(?i)\bBearer\s+([A-Za-z0-9._~+/-]{20,}=*)"),
    _ours("named_secret", r"(?i)(?<![A-Za-z0-9])" + _NAMED + r"\s*(?:=|:=|:|=>)\s*" + _VALUE, generic=True),
    _ours(
        "named_secret",
        r"(?i)\b(?:password|passphrase|passcode|api key|secret key|access key|token)\s+(?:is|was|=)\s+"
        + _VALUE,
        generic=True,
    ),
)

# A word every catch-all rule's label holds (theirs and detect-secrets' keyword list).
_LABEL_WORDS = ("pass", "pw", "secret", "key", "token", "contrase")
_PLACEHOLDER = re.compile(r"\[REDACTED:[a-z0-9_]+\]")
# A PEM block runs from its BEGIN line to its END line (or, cut short, to the end of the text).
_PEM_START = re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----|PuTTY-User-Key-File-\d")
_PEM_END = re.compile(r"-----END [A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----|Private-MAC: [0-9a-f]+")
# What a token is made of: a match that stops inside a longer token is widened to its end, so no
# tail of a longer (newer, or longer than the plugin expects) token is left behind.
_TOKEN_CHARS = re.compile(r"[A-Za-z0-9_-]*")


def _span(match: re.Match[str], group: int | None) -> tuple[int, int]:
    """The secret's part of a match: the rule's group, else the first group that matched
    (detect-secrets' convention), else the whole match; without the spaces and quotes some
    plugins match around it."""
    groups = [group] if group is not None else range(1, (match.re.groups or 0) + 1)
    for number in groups:
        if match.group(number):
            start, end = match.span(number)
            break
    else:
        start, end = match.span()
    text = match.string
    while start < end and text[start] in " \t\r\n\"'=:":
        start += 1
    while end > start and text[end - 1] in " \t\r\n\"'":
        end -= 1
    return start, end


def _matches(rule: _Rule, text: str) -> Iterator[re.Match[str]]:
    """The rule's matches; a catch-all rule's may overlap, since one label's match can swallow
    the next label (`SECRET: "password": "..."`), whose value is the secret."""
    if not rule.generic:
        yield from rule.pattern.finditer(text)
        return
    at = 0
    while (match := rule.pattern.search(text, at)) is not None:
        yield match
        at = match.start() + 1


def find(text: str) -> list[Finding]:
    """Every secret in `text`, in order, overlapping finds merged (the specific kind wins)."""
    if not text:
        return []
    raw: list[tuple[int, int, bool, str]] = []
    # A mask already in the text is not a secret (`password=[REDACTED:named_secret]`), so that
    # masking twice changes nothing and a scan of masked text finds nothing.
    masks = [m.span() for m in _PLACEHOLDER.finditer(text)]
    # The catch-all rules and the plugins' assignment patterns all need a label word.
    labelled = any(word in text.lower() for word in _LABEL_WORDS)
    for rule in RULES:
        if (rule.generic or rule.needs_label) and not labelled:
            continue
        for match in _matches(rule, text):
            start, end = _span(match, rule.group)
            if end <= start or (rule.check is not None and not rule.check(text[start:end])):
                continue
            if any(a <= start and end <= b for a, b in masks):
                continue
            if rule.kind == "private_key":
                begin = _PEM_START.search(text, max(0, start - 40), end + 40)
                start = begin.start() if begin is not None else start
                closing = _PEM_END.search(text, end)
                end = closing.end() if closing is not None else len(text)
            else:
                widened = _TOKEN_CHARS.match(text, end)
                end = widened.end() if widened is not None else end
            raw.append((start, end, rule.generic, rule.kind))
    raw.sort(key=lambda f: (f[0], -f[1]))
    merged: list[list[Any]] = []
    for start, end, generic, kind in raw:
        if merged and start < merged[-1][1]:
            last = merged[-1]
            last[1] = max(last[1], end)
            if last[2] and not generic:  # a known format names it, not the label around it
                last[2], last[3] = False, kind
            continue
        merged.append([start, end, generic, kind])
    return [Finding(kind, start, end) for start, end, _, kind in merged]


def placeholder(kind: str) -> str:
    return f"[REDACTED:{kind}]"


def mask(text: str, findings: Iterable[Finding]) -> str:
    out, at = [], 0
    for f in findings:
        out.append(text[at : f.start])
        out.append(placeholder(f.kind))
        at = f.end
    out.append(text[at:])
    return "".join(out)


def masked(text: str) -> str:
    """`text` with every secret in it masked."""
    return mask(text, find(text))


@dataclass
class Redaction:
    """What one write found: secrets by kind."""

    kinds: Counter[str] = field(default_factory=Counter)

    @property
    def count(self) -> int:
        return sum(self.kinds.values())

    def as_json(self) -> dict[str, Any]:
        return {"count": self.count, "kinds": dict(sorted(self.kinds.items()))}


class Redactor:
    """Applies HM_REDACT to the texts of one write, field by field, and tallies what it masked.
    Call it on every text before anything is written: in `refuse` mode the first secret raises."""

    def __init__(self, mode: RedactMode) -> None:
        if mode not in MODES:
            raise ValueError(f"redact mode {mode!r} is unknown; use one of {', '.join(MODES)}")
        self.mode = mode
        self.report = Redaction()

    def text(self, value: str, where: str) -> str:
        if self.mode == "off" or not value:
            return value
        found = find(value)
        if not found:
            return value
        if self.mode == "refuse":
            first = found[0]
            more = f" and {len(found) - 1} more" if len(found) > 1 else ""
            raise Unprocessable(
                f"{where} holds a secret ({first.kind} at offset {first.start}){more}; remove it and "
                "write again (the store refuses secrets: HM_REDACT=refuse)"
            )
        self.report.kinds.update(f.kind for f in found)
        return mask(value, found)

    def texts(self, values: Iterable[str], where: str) -> list[str]:
        return [self.text(v, f"{where}[{i}]") for i, v in enumerate(values)]

    def value(self, value: Any, where: str) -> Any:
        """A JSON value (metadata) with every string in it, keys included, redacted."""
        if isinstance(value, str):
            return self.text(value, where)
        if isinstance(value, Mapping):
            out = {}
            for k, v in value.items():
                key = self.text(str(k), f"{where} key")
                out[key] = self.value(v, f"{where}.{key}")
            return out
        if isinstance(value, list | tuple):
            return [self.value(v, f"{where}[{i}]") for i, v in enumerate(value)]
        return value
