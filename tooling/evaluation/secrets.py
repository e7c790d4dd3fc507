"""The secret detector's evaluation (hypermnesia/secrets.py): recall on a labelled corpus of fake
secrets in their real formats, generated here from a seed, and false positives on the sentences of
LoCoMo and SciFact (../shared/data), which hold no secrets.

Run: `python -m tooling.evaluation.secrets [--data-dir ../shared/data] [--seed 30] [--per-kind 40]`.

The corpus: every kind below makes fake secrets in its published format (prefixes, lengths,
alphabets; JWTs are real JWTs, PEM blocks real PEM framing), each placed in a form people paste
(bare, an environment line, JSON, a URL, a connection string) and that in one of the carrier
sentences (chat, notes, config, shell, YAML, Markdown). A secret counts as caught when every one of
its characters is inside a masked span. The carrier templates are split in two: the even ones
("dev") are the ones the extension patterns were checked on while they were written; the odd ones
("held out") were not looked at until the figures were taken. The false-positive sets are held
out too: no pattern was changed after measuring them.
"""

from __future__ import annotations

import argparse
import base64
import json
import random
import re
import string
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from hypermnesia import secrets

ALNUM = string.ascii_letters + string.digits
UPPER_ALNUM = string.ascii_uppercase + string.digits
LOWER_HEX = "0123456789abcdef"
URLSAFE = ALNUM + "-_"
B64 = ALNUM + "+/"


@dataclass(frozen=True)
class Example:
    kind: str
    template: int  # carrier template index: even = dev, odd = held out
    text: str
    start: int  # the secret's span in text
    end: int

    @property
    def held_out(self) -> bool:
        return self.template % 2 == 1

    @property
    def secret(self) -> str:
        return self.text[self.start : self.end]


def _pick(rng: random.Random, alphabet: str, n: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _password(rng: random.Random, symbols: str = "!#%*+-_.") -> str:
    """A password as people choose them: a word, digits, a symbol, mixed case."""
    word = rng.choice(["Summer", "tiger", "Blue", "orchid", "Falcon", "maple", "Quartz", "river", "Nimbus"])
    return word + _pick(rng, string.digits, rng.randint(2, 4)) + rng.choice(symbols) + _pick(rng, ALNUM, 6)


def _url_password(rng: random.Random) -> str:
    return _pick(rng, ALNUM, rng.randint(10, 20)) + rng.choice(["", "-", "_", "."]) + _pick(rng, ALNUM, 4)


def _jwt(rng: random.Random) -> str:
    header = {"alg": rng.choice(["HS256", "RS256", "ES256"]), "typ": "JWT"}
    payload = {"sub": _pick(rng, ALNUM, 12), "iat": rng.randint(1_600_000_000, 1_800_000_000)}
    if rng.random() < 0.5:
        payload["scope"] = rng.choice(["read", "admin", "deploy"])
    parts = [
        _b64url(json.dumps(header, separators=(",", ":")).encode()),
        _b64url(json.dumps(payload, separators=(",", ":")).encode()),
        _b64url(rng.randbytes(32)),
    ]
    return ".".join(parts)


def _pem(rng: random.Random) -> str:
    label = rng.choice(["RSA PRIVATE KEY", "PRIVATE KEY", "EC PRIVATE KEY", "OPENSSH PRIVATE KEY"])
    body = base64.b64encode(rng.randbytes(rng.choice([96, 144, 192]))).decode()
    lines = [body[i : i + 64] for i in range(0, len(body), 64)]
    return f"-----BEGIN {label}-----\n" + "\n".join(lines) + f"\n-----END {label}-----"


# kind -> (make the secret, the forms it is pasted in: "{v}" is the secret). The secret is the
# part that must not be stored; a form's other text (a user name, a host) may stay.
Maker = Callable[[random.Random], str]
KINDS: dict[str, tuple[Maker, tuple[str, ...]]] = {
    "aws_access_key": (
        lambda r: r.choice(["AKIA", "ASIA"]) + _pick(r, UPPER_ALNUM, 16),
        ("{v}", "AWS_ACCESS_KEY_ID={v}", "aws_access_key_id = {v}"),
    ),
    "aws_secret_key": (
        lambda r: _pick(r, B64, 40),
        ("aws_secret_access_key = {v}", "AWS_SECRET_ACCESS_KEY={v}", '"aws_secret_access_key": "{v}"'),
    ),
    "github_classic_token": (
        lambda r: r.choice(["ghp_", "gho_", "ghs_", "ghu_"]) + _pick(r, ALNUM, 36),
        ("{v}", "GITHUB_TOKEN={v}", "git clone https://{v}@github.com/acme/api.git"),
    ),
    "github_fine_grained_token": (
        lambda r: "github_pat_" + _pick(r, ALNUM, 22) + "_" + _pick(r, ALNUM, 59),
        ("{v}", "GH_TOKEN={v}"),
    ),
    "gitlab_token": (lambda r: "glpat-" + _pick(r, URLSAFE, 20), ("{v}", "GITLAB_TOKEN={v}")),
    "slack_bot_token": (
        lambda r: (
            r.choice(["xoxb-", "xoxp-"])
            + _pick(r, string.digits, 12)
            + "-"
            + _pick(r, string.digits, 13)
            + "-"
            + _pick(r, ALNUM, 24)
        ),
        ("{v}", "SLACK_BOT_TOKEN={v}"),
    ),
    "slack_webhook": (
        lambda r: (
            "https://hooks.slack.com/services/T"
            + _pick(r, UPPER_ALNUM, 8)
            + "/B"
            + _pick(r, UPPER_ALNUM, 10)
            + "/"
            + _pick(r, ALNUM, 24)
        ),
        ("{v}",),
    ),
    "stripe_secret_key": (
        lambda r: r.choice(["sk_live_", "rk_live_"]) + _pick(r, ALNUM, r.choice([24, 34, 99])),
        ("{v}", "STRIPE_SECRET_KEY={v}"),
    ),
    "jwt": (_jwt, ("{v}", "Authorization: Bearer {v}", "token={v}")),
    "private_key": (_pem, ("{v}",)),
    "postgres_url_password": (
        _url_password,
        ("postgres://app:{v}@db.internal:5432/prod", "postgresql://report_ro:{v}@10.0.3.12/analytics"),
    ),
    "mongodb_url_password": (
        _url_password,
        ("mongodb+srv://admin:{v}@cluster0.ab1cd.mongodb.net/app", "mongodb://svc:{v}@mongo-0:27017"),
    ),
    "redis_amqp_url_password": (
        _url_password,
        ("redis://default:{v}@cache.internal:6379/0", "amqp://worker:{v}@rabbit:5672/"),
    ),
    "https_basic_auth": (_url_password, ("https://deploy:{v}@registry.example.com/v2/",)),
    "sqlserver_connection_password": (
        lambda r: _password(r, "!#%*+-_.@$"),
        (
            "Server=tcp:acme.database.windows.net,1433;Database=app;User ID=app;Password={v};Encrypt=true;",
            "jdbc:mysql://db:3306/shop?user=shop&password={v}",
        ),
    ),
    "password_assignment": (
        _password,
        ("DB_PASSWORD={v}", 'password: "{v}"', '"password": "{v}"', "--password={v}", "SMTP_PASS={v}"),
    ),
    "password_in_prose": (_password, ("the password is {v}", "password was {v}")),
    "azure_storage_key": (
        lambda r: base64.b64encode(r.randbytes(64)).decode(),
        (
            "DefaultEndpointsProtocol=https;AccountName=acmelogs;AccountKey={v};EndpointSuffix=core.windows.net",
        ),
    ),
    "azure_client_secret": (
        lambda r: _pick(r, ALNUM, 3) + r.choice(string.digits) + "Q~" + _pick(r, ALNUM + "_~.-", 34),
        ("{v}", "AZURE_CLIENT_SECRET={v}"),
    ),
    "azure_sas_signature": (
        lambda r: (
            base64.b64encode(r.randbytes(32)).decode().rstrip("=").replace("+", "%2B").replace("/", "%2F")
            + "%3D"
        ),
        ("https://acme.blob.core.windows.net/backups/db.bak?sv=2022-11-02&ss=b&sp=r&se=2026-01-01&sig={v}",),
    ),
    "twilio_api_key": (lambda r: "SK" + _pick(r, LOWER_HEX, 32), ("{v}", "TWILIO_API_KEY={v}")),
    "sendgrid_key": (lambda r: "SG." + _pick(r, URLSAFE, 22) + "." + _pick(r, URLSAFE, 43), ("{v}",)),
    "npm_token": (
        lambda r: "npm_" + _pick(r, ALNUM, 36),
        ("{v}", "//registry.npmjs.org/:_authToken={v}"),
    ),
    "openai_key": (
        lambda r: r.choice(
            [
                "sk-proj-" + _pick(r, URLSAFE, 74) + "T3BlbkFJ" + _pick(r, URLSAFE, 74),
                "sk-" + _pick(r, ALNUM, 20) + "T3BlbkFJ" + _pick(r, ALNUM, 20),
            ]
        ),
        ("{v}", "OPENAI_API_KEY={v}"),
    ),
    "anthropic_key": (
        lambda r: "sk-ant-api03-" + _pick(r, URLSAFE, 93) + "AA",
        ("{v}", "ANTHROPIC_API_KEY={v}"),
    ),
    "google_api_key": (lambda r: "AIza" + _pick(r, URLSAFE, 35), ("{v}", "key={v}")),
    "google_oauth_client_secret": (lambda r: "GOCSPX-" + _pick(r, URLSAFE, 28), ("{v}",)),
    "discord_bot_token": (
        lambda r: (
            r.choice("MNO") + _pick(r, ALNUM, 23) + "." + _pick(r, URLSAFE, 6) + "." + _pick(r, URLSAFE, 27)
        ),
        ("{v}", "DISCORD_TOKEN={v}"),
    ),
    "mailchimp_key": (lambda r: _pick(r, LOWER_HEX, 32) + f"-us{r.randint(1, 21)}", ("{v}",)),
    "pypi_token": (lambda r: "pypi-AgEIcHlwaS5vcmc" + _pick(r, URLSAFE, 120), ("{v}", "password = {v}")),
    "telegram_bot_token": (
        lambda r: str(r.randint(100_000_000, 9_999_999_999)) + ":AA" + _pick(r, URLSAFE, 33),
        ("{v}",),
    ),
    "square_oauth_secret": (lambda r: "sq0csp-" + _pick(r, URLSAFE, 43), ("{v}",)),
    "huggingface_token": (lambda r: "hf_" + _pick(r, ALNUM, 34), ("{v}", "HF_TOKEN={v}")),
    "digitalocean_token": (lambda r: "dop_v1_" + _pick(r, LOWER_HEX, 64), ("{v}",)),
    "shopify_token": (lambda r: "shpat_" + _pick(r, LOWER_HEX, 32), ("{v}",)),
    "bearer_token": (
        lambda r: _pick(r, URLSAFE + ".~", r.randint(32, 64)),
        ("Authorization: Bearer {v}", "curl -H 'Authorization: Bearer {v}' https://api.example.com"),
    ),
    "artifactory_token": (lambda r: "AKC" + _pick(r, ALNUM, 70), ("{v}",)),
}

# Carrier sentences: {s} is the secret in its form. Even = dev, odd = held out.
TEMPLATES = (
    "the staging credential is {s} until we rotate it on Friday",
    "Note to self: {s}",
    "{s} is what the deploy job reads, do not lose it",
    "I pasted {s} into the CI settings; rotate it next week.",
    "export it first:\n{s}\nthen run make deploy",
    'config.json has {{"value": "{s}"}} for the billing worker',
    "```\n{s}\n```\nthat's the snippet from the runbook",
    "Alice said the new one is {s} (the old one was revoked).",
    "- prod: {s}\n- staging: ask Bob",
    "env:\n  SECRET: {s}\n  REGION: eu-west-1",
    "ok so for the integration test use {s} and the sandbox account",
    "When the nightly backup fails, check {s} and restart the agent.",
    "remember {s}",
    "The migration script connects with {s}, so keep the VPN up.",
    "> {s}\nquoted from the incident channel",
    "keys we use: {s}, plus the read-only one in the vault",
)


def generate(seed: int, per_kind: int) -> list[Example]:
    """`per_kind` examples of every kind, deterministic in `seed`; templates cycle so each kind
    has dev and held-out examples."""
    rng = random.Random(seed)
    out: list[Example] = []
    for kind, (make, forms) in KINDS.items():
        for i in range(per_kind):
            secret = make(rng)
            form = forms[i % len(forms)]
            template_index = rng.randrange(len(TEMPLATES))
            template = TEMPLATES[template_index]
            before_form, _, after_form = form.partition("{v}")
            before_s, _, after_s = template.partition("{s}")
            prefix = before_s.replace("{{", "{").replace("}}", "}") + before_form
            text = prefix + secret + after_form + after_s.replace("{{", "{").replace("}}", "}")
            out.append(Example(kind, template_index, text, len(prefix), len(prefix) + len(secret)))
    return out


def caught(example: Example, findings: list[secrets.Finding]) -> bool:
    """Every character of the secret is inside a finding."""
    covered = [False] * (example.end - example.start)
    for f in findings:
        for i in range(max(f.start, example.start), min(f.end, example.end)):
            covered[i - example.start] = True
    return all(covered)


_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(\[])")


def sentences(text: str) -> Iterator[str]:
    for part in _SENTENCE.split(text):
        if part.strip():
            yield part.strip()


def dataset_sentences(data_dir: Path) -> dict[str, list[str]]:
    from tooling.evaluation.datasets import load_locomo, load_scifact

    out: dict[str, list[str]] = {}
    out["LoCoMo"] = [s for corpus in load_locomo(data_dir) for d in corpus.docs for s in sentences(d.content)]
    out["SciFact"] = [
        s
        for corpus in load_scifact(data_dir)
        for d in corpus.docs
        for s in [*sentences(d.description), *sentences(d.content)]
    ]
    return out


@dataclass
class Figures:
    recall_rows: list[tuple[str, int, int, int, int]]  # kind, dev caught, dev n, held-out caught, n
    misses: list[Example]
    fp_rows: list[tuple[str, int, int]]  # dataset, sentences flagged, sentences
    fp_examples: list[tuple[str, str, str]]  # dataset, kind, sentence


def evaluate(seed: int, per_kind: int, data_dir: Path | None) -> Figures:
    examples = generate(seed, per_kind)
    by_kind: dict[str, list[int]] = {k: [0, 0, 0, 0] for k in KINDS}
    misses = []
    for ex in examples:
        ok = caught(ex, secrets.find(ex.text))
        row = by_kind[ex.kind]
        base = 2 if ex.held_out else 0
        row[base] += ok
        row[base + 1] += 1
        if not ok:
            misses.append(ex)
    fp_rows, fp_examples = [], []
    if data_dir is not None:
        for name, items in dataset_sentences(data_dir).items():
            flagged = 0
            for sentence in items:
                found = secrets.find(sentence)
                if found:
                    flagged += 1
                    fp_examples.append((name, found[0].kind, sentence))
            fp_rows.append((name, flagged, len(items)))
    return Figures([(k, *v) for k, v in by_kind.items()], misses, fp_rows, fp_examples)  # type: ignore[misc]


def _pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.2f}%" if whole else "-"


def table(f: Figures) -> str:
    lines = ["| kind | dev caught | held-out caught |", "|---|---:|---:|"]
    totals = [0, 0, 0, 0]
    for kind, dc, dn, hc, hn in f.recall_rows:
        lines.append(f"| {kind} | {dc}/{dn} | {hc}/{hn} |")
        for i, v in enumerate((dc, dn, hc, hn)):
            totals[i] += v
    dc, dn, hc, hn = totals
    lines.append(
        f"| **all {len(f.recall_rows)} kinds** | {dc}/{dn} ({_pct(dc, dn)}) | {hc}/{hn} ({_pct(hc, hn)}) |"
    )
    lines.append(f"\nrecall, every example: {dc + hc}/{dn + hn} = {_pct(dc + hc, dn + hn)}")
    if f.fp_rows:
        lines += ["", "| dataset (no secrets) | sentences flagged | sentences | false-positive rate |"]
        lines.append("|---|---:|---:|---:|")
        for name, flagged, n in f.fp_rows:
            lines.append(f"| {name} | {flagged} | {n:,} | {_pct(flagged, n)} |")
        flagged = sum(r[1] for r in f.fp_rows)
        n = sum(r[2] for r in f.fp_rows)
        lines.append(f"| **both** | {flagged} | {n:,} | {_pct(flagged, n)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=30)
    parser.add_argument("--per-kind", type=int, default=40)
    parser.add_argument("--data-dir", type=Path, default=Path("../shared/data"))
    parser.add_argument("--no-datasets", action="store_true", help="recall only (no LoCoMo/SciFact)")
    parser.add_argument("--show", action="store_true", help="print the misses and the flagged sentences")
    args = parser.parse_args(argv)
    figures = evaluate(args.seed, args.per_kind, None if args.no_datasets else args.data_dir)
    print(table(figures))
    if args.show:
        for ex in figures.misses:
            print(f"MISS {ex.kind} (template {ex.template}): {ex.text!r}")
        for name, kind, sentence in figures.fp_examples:
            print(f"FLAGGED {name} as {kind}: {sentence!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
