#!/usr/bin/env python3
"""Writes the job-log redaction corpus next to this script.

  secrets.tsv   rule<TAB>secret<TAB>line   (one leaked secret per row)
  ordinary.txt  lines that contain no secret and must be kept byte for byte

Every secret is fake: its body is drawn from a random.Random with a fixed
seed, in the charset and length of the real format.  Stdlib only; running the
script twice writes identical files.  Usage: python3 make_corpus.py
"""

import base64
import json
import os
import random
import string
import sys
import urllib.parse

SEED = 20240603
rng = random.Random(SEED)           # secrets
orng = random.Random(SEED + 1)      # digests / ids in ordinary lines

DIG = string.digits
LOW = string.ascii_lowercase
UPP = string.ascii_uppercase
LET = string.ascii_letters
ALNUM = LET + DIG
LALNUM = LOW + DIG
UALNUM = UPP + DIG
HEX = "0123456789abcdef"
B64 = ALNUM + "+/"
URLSAFE = ALNUM + "-_"
BECH32 = "QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L"
AWS_ID = UPP + "234567"
WORDS = ["amber", "canyon", "violet", "lantern", "quartz", "harbor", "meadow",
         "cobalt", "falcon", "ember", "juniper", "orbit", "pebble", "tundra"]


def r(n, cs=ALNUM, g=None):
    g = g or rng
    return "".join(g.choice(cs) for _ in range(n))


def hx(n, g=None):
    return r(n, HEX, g)


def rbytes(n, g=None):
    g = g or rng
    return bytes(g.randrange(256) for _ in range(n))


def b64(data):
    return base64.b64encode(data).decode()


def b64url(data):
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def uuid4(g=None):
    h = hx(32, g)
    var = (g or rng).choice("89ab")
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{var}{h[17:20]}-{h[20:]}"


def pw(n=14, must=""):
    """Human-set password: random alnum body with the given specials inserted."""
    chars = list(r(n))
    for ch in must:
        chars.insert(rng.randrange(1, len(chars)), ch)
    return "".join(chars)


def passphrase(k=4):
    return " ".join(rng.sample(WORDS, k)) + " " + r(3, DIG)


def jwt(payload, alg="RS256", kid=None):
    hdr = {"alg": alg, "typ": "JWT"}
    if kid:
        hdr = {"alg": alg, "kid": kid}
    h = b64url(json.dumps(hdr, separators=(",", ":")).encode())
    p = b64url(json.dumps(payload, separators=(",", ":")).encode())
    sig = b64url(rbytes(256 if alg.startswith("RS") else 32))
    return f"{h}.{p}.{sig}"


def k8s_sa_jwt(ns, sa):
    iat = 1717400000 + rng.randrange(86400)
    payload = {
        "aud": ["https://kubernetes.default.svc.cluster.local"],
        "exp": iat + 31536000, "iat": iat,
        "iss": "https://kubernetes.default.svc.cluster.local",
        "kubernetes.io": {"namespace": ns,
                          "serviceaccount": {"name": sa, "uid": uuid4()}},
        "nbf": iat, "sub": f"system:serviceaccount:{ns}:{sa}"}
    return jwt(payload, kid=b64url(rbytes(32)))


def der_body(kind):
    """Base64 of a fake DER/binary private key with a realistic header."""
    if kind == "rsa":        # PKCS#1 RSAPrivateKey, 2048 bit
        raw = bytes.fromhex("308204a40201000282010100") + rbytes(1180)
    elif kind == "pkcs8":    # PKCS#8 PrivateKeyInfo (rsaEncryption)
        raw = bytes.fromhex("308204be020100300d06092a864886f70d010101050004"
                            "8204a8") + rbytes(1192)
    elif kind == "ec":       # SEC1 ECPrivateKey, P-256
        raw = (bytes.fromhex("30770201010420") + rbytes(32)
               + bytes.fromhex("a00a06082a8648ce3d030107a144034200") + rbytes(65))
    elif kind == "enc":      # PKCS#8 EncryptedPrivateKeyInfo (PBES2)
        raw = bytes.fromhex("30820524305606092a864886f70d01050d3049") + rbytes(1290)
    elif kind == "openssh":
        raw = (b"openssh-key-v1\x00" + b"\x00\x00\x00\x04none" * 2
               + b"\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x33"
               + b"\x00\x00\x00\x0bssh-ed25519" + rbytes(300))
    elif kind == "pgp":      # old-format secret-key packet, v4 EdDSA
        raw = b"\x94\x58\x04" + rbytes(420)
    else:
        raise ValueError(kind)
    return b64(raw)


def chunks(s, n=64):
    return [s[i:i + n] for i in range(0, len(s), n)]


# --------------------------------------------------------------------------
# rule id -> (family, public rule set it is named after)
#   family: token = vendor/cloud/AI/dev-tool token formats
#           kv    = unprefixed secret named by a key (env, config, headers)
#           url   = secret found by its place in a URL/DSN/connection string
#           cli   = unprefixed secret found by a command-line flag/position
#           blob  = private keys, JWTs, base64 credential blobs
G, T, D, X = "gitleaks", "trufflehog", "detect-secrets", "descriptive"
RULES = {
    # token
    "aws-access-token": ("token", G), "aws-secret-access-key": ("token", T),
    "aws-session-token": ("token", T), "gcp-api-key": ("token", G),
    "gcp-oauth-access-token": ("token", T), "azure-ad-client-secret": ("token", G),
    "github-pat": ("token", G), "github-oauth": ("token", G),
    "github-app-token": ("token", G), "github-refresh-token": ("token", G),
    "github-fine-grained-pat": ("token", G), "gitlab-pat": ("token", G),
    "gitlab-pat-routable": ("token", G), "gitlab-ptt": ("token", G),
    "gitlab-deploy-token": ("token", G),
    "gitlab-runner-authentication-token": ("token", G),
    "gitlab-rrt": ("token", G), "gitlab-cicd-job-token": ("token", G),
    "gitlab-scim-token": ("token", G), "gitlab-session-cookie": ("token", G),
    "bitbucket-app-password": ("token", T), "atlassian-api-token": ("token", G),
    "npm-access-token": ("token", G), "pypi-upload-token": ("token", G),
    "rubygems-api-token": ("token", G), "dockerhub-pat": ("token", T),
    "huggingface-access-token": ("token", G),
    "huggingface-organization-api-token": ("token", G),
    "openai-api-key": ("token", G), "anthropic-api-key": ("token", G),
    "anthropic-admin-api-key": ("token", G), "groq-api-key": ("token", T),
    "perplexity-api-key": ("token", G), "replicate-api-token": ("token", T),
    "cohere-api-token": ("token", G), "mistral-api-key": ("token", X),
    "together-api-key": ("token", X), "wandb-api-key": ("token", T),
    "openrouter-api-key": ("token", T), "xai-api-key": ("token", X),
    "nvidia-nvapi-key": ("token", X), "langsmith-api-key": ("token", T),
    "deepseek-api-key": ("token", T), "stripe-access-token": ("token", G),
    "twilio-api-key": ("token", G), "twilio-auth-token": ("token", T),
    "sendgrid-api-token": ("token", G), "mailgun-private-api-token": ("token", G),
    "mailchimp-api-key": ("token", G), "shopify-access-token": ("token", G),
    "shopify-shared-secret": ("token", G), "databricks-api-token": ("token", G),
    "digitalocean-pat": ("token", G), "heroku-api-key": ("token", G),
    "heroku-api-key-v2": ("token", G), "vault-service-token": ("token", G),
    "vault-batch-token": ("token", G), "hashicorp-tf-api-token": ("token", G),
    "doppler-api-token": ("token", G), "grafana-cloud-api-token": ("token", G),
    "grafana-service-account-token": ("token", G),
    "new-relic-user-api-key": ("token", G), "linear-api-key": ("token", G),
    "postman-api-token": ("token", G), "pulumi-api-token": ("token", G),
    "sentry-org-token": ("token", G), "sentry-user-token": ("token", G),
    "supabase-access-token": ("token", T), "planetscale-api-token": ("token", G),
    "planetscale-password": ("token", G), "sonar-api-token": ("token", G),
    "artifactory-api-key": ("token", G), "alibaba-access-key-id": ("token", G),
    "alibaba-secret-key": ("token", G), "tencent-cloud-secret-id": ("token", T),
    "tencent-cloud-secret-key": ("token", T),
    "facebook-page-access-token": ("token", G),
    "facebook-access-token": ("token", G), "square-access-token": ("token", G),
    "square-oauth-secret": ("token", D), "notion-api-token": ("token", G),
    "age-secret-key": ("token", G), "okta-access-token": ("token", G),
    "slack-bot-token": ("token", G), "slack-user-token": ("token", G),
    "slack-app-token": ("token", G), "discord-bot-token": ("token", D),
    "telegram-bot-api-token": ("token", G), "openshift-user-token": ("token", G),
    "prefect-api-token": ("token", G),
    "1password-service-account-token": ("token", G),
    "cloudflare-api-key": ("token", G), "datadog-api-key": ("token", T),
    "azure-openai-api-key": ("token", T), "circleci-personal-token": ("token", T),
    "ngrok-authtoken": ("token", T), "kubeadm-bootstrap-token": ("token", X),
    # kv
    "env-pgpassword": ("kv", X), "env-mysql-pwd": ("kv", X),
    "env-rediscli-auth": ("kv", X), "env-passwd": ("kv", X),
    "env-password-suffix": ("kv", D), "env-password-quoted-spaces": ("kv", X),
    "env-password-quoted-dquote": ("kv", X), "env-password-percent": ("kv", X),
    "env-password-slash-hash": ("kv", X), "env-secret-key-base": ("kv", X),
    "env-secret-suffix": ("kv", D), "env-access-token-secret": ("kv", X),
    "env-api-key-suffix": ("kv", D), "env-token-suffix": ("kv", D),
    "env-passphrase-suffix": ("kv", D), "env-encryption-key": ("kv", X),
    "declare-x-password": ("kv", X), "os-environ-token": ("kv", X),
    "kv-camelcase-dbpassword": ("kv", X), "kv-camelcase-clientsecret": ("kv", X),
    "kv-camelcase-secretkey": ("kv", X),
    "kv-django-secret-key": ("kv", X), "py-dict-password": ("kv", D),
    "py-namespace-password": ("kv", X), "yaml-password-quoted-hash-colon": ("kv", X),
    "yaml-api-key": ("kv", D), "json-password": ("kv", D),
    "json-escaped-password": ("kv", X), "hydra-override-password": ("kv", X),
    "libpq-dsn-password": ("kv", X), "kubernetes-secret-yaml": ("kv", G),
    "git-credential-password": ("kv", X), "pgpass-password": ("kv", X),
    "netrc-password": ("kv", X), "kafka-sasl-jaas-password": ("kv", X),
    "kafka-sasl-password": ("kv", X), "http-authorization-bearer": ("kv", X),
    "http-cookie-session": ("kv", X), "http-set-cookie-session": ("kv", X),
    "http-x-api-key": ("kv", X), "ini-password": ("kv", X),
    "env-password-short": ("kv", X), "env-password-digits": ("kv", X),
    "env-password-wordlike": ("kv", X), "yaml-password": ("kv", X),
    "yaml-passwd": ("kv", X), "yaml-secret": ("kv", X), "yaml-token": ("kv", X),
    "toml-api-token": ("kv", X), "logfmt-password": ("kv", X),
    "logfmt-secret-key": ("kv", X), "form-client-secret": ("kv", X),
    "json-refresh-token": ("kv", X), "py-dict-access-token": ("kv", X),
    "py-kwargs-passwd": ("kv", X), "kv-camelcase-apikey": ("kv", X),
    "kv-camelcase-accesstoken": ("kv", X), "java-properties-password": ("kv", X),
    "http-x-auth-token": ("kv", X), "http-authorization-token": ("kv", X),
    "go-struct-password": ("kv", X), "env-master-key": ("kv", X),
    "docker-env-password": ("kv", X), "kubectl-describe-env-password": ("kv", X),
    "systemd-environment-password": ("kv", X), "ansible-become-pass": ("kv", X),
    "env-private-key-passphrase": ("kv", X),
    # url
    "url-userinfo-at-in-password": ("url", X),
    "url-userinfo-percent-encoded": ("url", X),
    "url-userinfo-colon-in-password": ("url", X), "url-password-only": ("url", X),
    "url-userinfo-password": ("url", D), "proxy-url-password": ("url", X),
    "pip-index-url-password": ("url", X), "jdbc-password-param": ("url", X),
    "jdbc-sqlserver-password": ("url", X), "odbc-pwd-braced": ("url", X),
    "azure-storage-account-key": ("url", D),
    "azure-servicebus-shared-access-key": ("url", X),
    "azure-sas-signature": ("url", X), "gcs-signed-url-signature": ("url", X),
    "s3-presigned-url-signature": ("url", X),
    "slack-webhook-url": ("url", G), "discord-webhook-url": ("url", T),
    "microsoft-teams-webhook": ("url", G), "azure-logic-app-webhook-sig": ("url", X),
    "zapier-webhook-url": ("url", T), "url-query-access-token": ("url", X),
    "anaconda-channel-token": ("url", X), "sentry-dsn-secret": ("url", X),
    "jupyter-server-token": ("url", X), "url-userinfo-multihost": ("url", X),
    "pip-requirement-git-url-token": ("url", X), "url-query-api-key": ("url", X),
    # cli
    "cli-curl-user": ("cli", G), "curl-auth-header": ("cli", G),
    "cli-docker-login-p": ("cli", X), "cli-mysql-p-attached": ("cli", X),
    "cli-mysql-password-eq": ("cli", X), "cli-sshpass-p": ("cli", X),
    "cli-ldapsearch-w": ("cli", X), "cli-redis-cli-a": ("cli", X),
    "cli-sqlcmd-P": ("cli", X), "cli-mongosh-p": ("cli", X),
    "cli-ray-redis-password": ("cli", X), "cli-vllm-api-key": ("cli", X),
    "cli-flag-api-key-eq": ("cli", X), "cli-openssl-pass": ("cli", X),
    "cli-gpg-passphrase": ("cli", X), "cli-7z-p": ("cli", X),
    "cli-mc-alias-secret-key": ("cli", X), "cli-htpasswd-b": ("cli", X),
    "cli-smbclient-user-percent": ("cli", X), "argv-list-password": ("cli", X),
    "argv-list-docker-login-p": ("cli", X), "cli-sqlplus-slash": ("cli", X),
    "cli-ssh-keygen-N": ("cli", X), "cli-wget-http-password": ("cli", X),
    "cli-password-flag-quoted": ("cli", X), "cli-rclone-s3-secret": ("cli", X),
    "cli-zip-P": ("cli", X), "cli-influx-password": ("cli", X),
    "cli-rabbitmqctl-add-user": ("cli", X), "cli-vault-kv-put": ("cli", X),
    "cli-kubectl-from-literal": ("cli", X), "cli-mount-cifs-password": ("cli", X),
    "cli-lftp-u": ("cli", X), "cli-java-sysprop-password": ("cli", X),
    "cli-spark-conf-secret-key": ("cli", X), "cli-helm-set-password": ("cli", X),
    # blob
    "private-key": ("blob", G), "kubeconfig-client-key-data": ("blob", X),
    "kubernetes-service-account-token": ("blob", X), "jwt": ("blob", G),
    "docker-config-auth": ("blob", X), "http-basic-auth": ("blob", D),
    "gcp-service-account-json-base64": ("blob", X),
    "dockerconfigjson-base64": ("blob", X),
    "redis-monitor-auth": ("kv", X), "sql-create-user-password": ("kv", X),
    "dockerfile-env-password": ("kv", X), "terraform-plan-password": ("kv", X),
    "env-secret-one-word": ("kv", X), "env-token-one-word": ("kv", X),
    "env-api-key-one-word": ("kv", X), "py-auth-tuple": ("kv", X),
    "yaml-kebab-client-secret": ("kv", X), "yaml-uppercase-password": ("kv", X),
    "compose-env-list-password": ("kv", X),
    "adonet-password": ("url", X), "url-userinfo-unix-socket": ("url", X),
    "url-password-only-ipv6-host": ("url", X), "url-query-password": ("url", X),
    "cli-ansible-extra-vars-password": ("cli", X),
    "npmrc-auth-base64": ("blob", X), "kerberos-keytab-base64": ("blob", X),
    "pkcs12-base64": ("blob", X), "ssh-private-key-base64": ("blob", X),
    "gcp-oauth-refresh-token": ("token", T),
}

ROWS = []


def add(rule, secret, line):
    ROWS.append((rule, secret, line))


# ==========================================================================
# token family: vendor / cloud / AI / dev-tool formats
# ==========================================================================
akia = "AKIA" + r(16, AWS_ID)
add("aws-access-token", akia, f"+ export AWS_ACCESS_KEY_ID={akia}")
asia = "ASIA" + r(16, AWS_ID)
add("aws-access-token", asia,
    f"[rank0]:[2024-06-03 09:14:22] INFO s3_ckpt.py:88 uploading shard 3/8 to "
    f"s3://ml-ckpts/llama3-70b/step_12000/ as {asia} (region us-west-2)")
aws_sk = r(40, B64)
add("aws-secret-access-key", aws_sk, f"AWS_SECRET_ACCESS_KEY={aws_sk}")
aws_sk = r(40, B64)
add("aws-secret-access-key", aws_sk, f"aws_secret_access_key = {aws_sk}")
aws_sk = r(40, B64)
add("aws-secret-access-key", aws_sk, f'        "SecretAccessKey": "{aws_sk}",')
aws_sk = r(40, B64)
add("aws-secret-access-key", aws_sk,
    "S3Client config: { region: 'us-east-1', endpoint: 'http://minio.ml.svc:9000', "
    f"credentials: {{ accessKeyId: 'ml-writer', secretAccessKey: '{aws_sk}' }} }}")
aws_sk = r(40, B64)
add("aws-secret-access-key", aws_sk, f"+ aws configure set aws_secret_access_key {aws_sk}")
sess = "IQoJb3JpZ2luX2VjE" + r(420, B64)
add("aws-session-token", sess, f"AWS_SESSION_TOKEN={sess}")

aiza = "AIzaSy" + r(33, URLSAFE)
add("gcp-api-key", aiza, f"GOOGLE_API_KEY={aiza}")
aiza = "AIzaSy" + r(33, URLSAFE)
add("gcp-api-key", aiza,
    f"W0603 09:15:01.112 gemini_judge.py:41] falling back to {aiza} for judge "
    "model gemini-1.5-pro (quota exceeded on primary)")
aiza = "AIzaSy" + r(33, URLSAFE)
add("gcp-api-key", aiza,
    "requests.exceptions.HTTPError: 429 Client Error: Too Many Requests for url: "
    "https://generativelanguage.googleapis.com/v1beta/models/gemini-1.5-pro:"
    f"generateContent?key={aiza}")
ya29 = "ya29.a0AXooCg" + r(160, URLSAFE)
add("gcp-oauth-access-token", ya29,
    f"+ curl -sS -H 'Authorization: Bearer {ya29}' "
    "https://storage.googleapis.com/storage/v1/b/ml-datasets/o?prefix=shards/")
ya29 = "ya29.c.b0AXv0zT" + r(180, URLSAFE)
add("gcp-oauth-access-token", ya29,
    f"DEBUG google.auth: refreshed {ya29} for loader@acme-ml.iam.gserviceaccount.com")


def azure_secret():
    return r(3, ALNUM) + r(1, DIG) + "Q~" + r(34, ALNUM + "_~.-")


az = azure_secret()
add("azure-ad-client-secret", az, f"AZURE_CLIENT_SECRET={az}")
az = azure_secret()
add("azure-ad-client-secret", az,
    f"+ az login --service-principal -u {uuid4()} -p {az} --tenant {uuid4()}")
az = azure_secret()
add("azure-ad-client-secret", az,
    f"azureml: workspace auth ServicePrincipalAuthentication(client secret {az})")

t = "ghp_" + r(36)
add("github-pat", t,
    f"warning: {t} has no 'repo' scope; private submodule third_party/cutlass skipped")
t = "ghp_" + r(36)
add("github-pat", t,
    f'+ git config --global url."https://x-access-token:{t}@github.com/".insteadOf '
    '"https://github.com/"')
t = "ghp_" + r(36)
add("github-pat", t, f"password={t}")
t = "gho_" + r(36)
add("github-oauth", t, f"GH_TOKEN={t}")
t = "ghs_" + r(36)
add("github-app-token", t, f"  GITHUB_TOKEN: {t}")
t = "ghu_" + r(36)
add("github-app-token", t, f"Authenticated as acme-ml-bot[bot] with {t} (expires in 28800s)")
t = "ghr_" + r(76)
add("github-refresh-token", t, f"oauth: stored refresh_token={t} in keyring")
t = "github_pat_" + r(22) + "_" + r(59)
add("github-fine-grained-pat", t,
    f"Namespace(repo='acme-ml/evals', github_token='{t}', dry_run=False, branch='main')")
t = "github_pat_" + r(22) + "_" + r(59)
add("github-fine-grained-pat", t, f"fetching private datasets manifest using {t}")

t = "glpat-" + r(20, URLSAFE)
add("gitlab-pat", t,
    f"+ git clone https://oauth2:{t}@gitlab.com/acme-ml/tokenizers.git /workspace/tok")
t = "glpat-" + r(20, URLSAFE)
add("gitlab-pat", t,
    f"+ curl --fail -sS --header 'PRIVATE-TOKEN: {t}' "
    "https://gitlab.example.com/api/v4/projects/812/packages/generic/ckpt/1.0/model.tar")
t = "glpat-" + r(20, URLSAFE)
add("gitlab-pat", t, f"Registry login for gitlab.example.com:5050 with {t} succeeded")
t = "glpat-" + r(36, URLSAFE) + "." + r(2, LALNUM) + r(7, LALNUM)
add("gitlab-pat-routable", t, f"CI_REGISTRY_PASSWORD={t}")
t = "glptt-" + hx(40)
add("gitlab-ptt", t,
    f"+ curl -X POST --fail -F token={t} -F ref=main "
    "https://gitlab.example.com/api/v4/projects/812/trigger/pipeline")
t = "gldt-" + r(20, URLSAFE)
add("gitlab-deploy-token", t,
    f"Cloning into 'data'... https://gitlab+deploy-token-41:{t}@gitlab.example.com/ml/data.git")
t = "glrt-" + r(20, URLSAFE)
add("gitlab-runner-authentication-token", t,
    "+ gitlab-runner register --non-interactive --url https://gitlab.example.com "
    f"--token {t} --executor docker --docker-image nvcr.io/nvidia/pytorch:24.05-py3")
t = "GR1348941" + r(20, URLSAFE)
add("gitlab-rrt", t, f"+ REGISTRATION_TOKEN={t}")
t = "glcbt-" + r(2, LALNUM) + "_" + r(20, URLSAFE)
add("gitlab-cicd-job-token", t, f"CI_JOB_TOKEN={t}")
t = "glsoat-" + r(20, URLSAFE)
add("gitlab-scim-token", t, f"scim sync: provisioning users with {t}")
t = hx(32)
add("gitlab-session-cookie", t,
    f"header: Set-Cookie: _gitlab_session={t}; path=/; secure; HttpOnly; SameSite=None")

t = "ATBB" + r(32)
add("bitbucket-app-password", t,
    f"+ git clone https://ml-bot:{t}@bitbucket.org/acme/feature-store.git")
t = "ATATT3xFfGF0" + r(171, URLSAFE) + "=" + hx(8).upper()
add("atlassian-api-token", t, f"JIRA_API_TOKEN={t}")
t = "ATATT3xFfGF0" + r(171, URLSAFE) + "=" + hx(8).upper()
add("atlassian-api-token", t, f"confluence-publisher: posting eval report with {t}")

t = "npm_" + r(36)
add("npm-access-token", t, f"//registry.npmjs.org/:_authToken={t}")
t = "npm_" + r(36)
add("npm-access-token", t, f"+ npm config set //registry.npmjs.org/:_authToken {t}")
t = "pypi-AgEIcHlwaS5vcmcCJ" + r(160, URLSAFE)
add("pypi-upload-token", t, f"TWINE_PASSWORD={t}")
t = "pypi-AgEIcHlwaS5vcmcCJ" + r(150, URLSAFE)
add("pypi-upload-token", t, f"+ twine upload --non-interactive -u __token__ -p {t} dist/*")
t = "rubygems_" + hx(48)
add("rubygems-api-token", t, f"GEM_HOST_API_KEY={t}")
t = "dckr_pat_" + r(27, URLSAFE)
add("dockerhub-pat", t, f"+ echo {t}")
t = "dckr_pat_" + r(27, URLSAFE)
add("dockerhub-pat", t, f"DOCKERHUB_TOKEN={t}")

t = "hf_" + r(34, LET)
add("huggingface-access-token", t, f"HF_TOKEN={t}")
t = "hf_" + r(34, LET)
add("huggingface-access-token", t,
    f"[launcher] gpu-node-07: fetching meta-llama/Meta-Llama-3-70B as {t} (read scope)")
t = "hf_" + r(34, LET)
add("huggingface-access-token", t,
    f"Namespace(model_name_or_path='meta-llama/Llama-3.1-8B', hf_token='{t}', "
    "output_dir='/ckpt/run-0042', bf16=True, seed=1234)")
t = "hf_" + r(34, LET)
add("huggingface-access-token", t, f"+ huggingface-cli login --token {t} --add-to-git-credential")
t = "hf_" + r(34, LET)
add("huggingface-access-token", t, f"      HUGGING_FACE_HUB_TOKEN:  {t}")
t = "hf_" + r(34, LET)
add("huggingface-access-token", t,
    f"+ git push https://jane:{t}@huggingface.co/acme-ml/llama3-sft-v2 main")
t = "hf_" + r(34, LET)
add("huggingface-access-token", t,
    "+ torchrun --nnodes 8 --nproc_per_node 8 --rdzv_backend c10d --rdzv_endpoint "
    "gpu-node-01:29400 train.py --model meta-llama/Meta-Llama-3-70B --dataset "
    "acme-ml/sft-mix-v3 --seq-len 8192 --micro-batch-size 1 --global-batch-size 512 "
    "--lr 1e-5 --warmup-steps 100 --save-interval 500 --output-dir /ckpt/llama3-70b-sft "
    f"--hf_token {t}")
t = "api_org_" + r(34, LET)
add("huggingface-organization-api-token", t, f"HF_HUB_TOKEN={t}")


def openai_proj(prefix):
    return prefix + r(74, URLSAFE) + "T3BlbkFJ" + r(74, URLSAFE)


t = openai_proj("sk-proj-")
add("openai-api-key", t, f"OPENAI_API_KEY={t}")
t = openai_proj("sk-proj-")
add("openai-api-key", t,
    f"client kwargs: {{'model': 'gpt-4o-mini', 'api_key': '{t}', 'max_retries': 3, 'timeout': 60}}")
t = openai_proj("sk-svcacct-")
add("openai-api-key", t, f"eval harness: judge=gpt-4o key={t} rpm=500")
t = "sk-" + r(20) + "T3BlbkFJ" + r(20)
add("openai-api-key", t, f"  openai_api_key: {t}")
t = openai_proj("sk-admin-")
add("openai-api-key", t, f"usage exporter started with {t}")
t = "sk-ant-api03-" + r(93, URLSAFE) + "AA"
add("anthropic-api-key", t, f"ANTHROPIC_API_KEY={t}")
t = "sk-ant-api03-" + r(93, URLSAFE) + "AA"
add("anthropic-api-key", t,
    f"request headers: {{'x-api-key': '{t}', 'anthropic-version': '2023-06-01', "
    "'content-type': 'application/json'}")
t = "sk-ant-admin01-" + r(93, URLSAFE) + "AA"
add("anthropic-admin-api-key", t, f"workspace sync using {t}")
t = "gsk_" + r(52)
add("groq-api-key", t, f"GROQ_API_KEY={t}")
t = "gsk_" + r(52)
add("groq-api-key", t, f"llm-judge backend=groq model=llama3-70b-8192 key {t}")
t = "pplx-" + r(48)
add("perplexity-api-key", t, f'{{"provider": "perplexity", "api_key": "{t}"}}')
t = "r8_" + r(37)
add("replicate-api-token", t, f"REPLICATE_API_TOKEN={t}")
t = r(40)
add("cohere-api-token", t, f"COHERE_API_KEY={t}")
t = r(40)
add("cohere-api-token", t, f"+ export CO_API_KEY={t}")
t = r(32)
add("mistral-api-key", t, f"MISTRAL_API_KEY={t}")
t = hx(64)
add("together-api-key", t, f"TOGETHER_API_KEY={t}")
t = hx(40)
add("wandb-api-key", t, f"WANDB_API_KEY={t}")
t = hx(40)
add("wandb-api-key", t, f"+ wandb login {t}")
t = hx(40)
add("wandb-api-key", t, f"machine api.wandb.ai login user password {t}")
t = hx(40)
add("wandb-api-key", t, f"wandb.login(key='{t}', relogin=True) -> True")
t = "sk-or-v1-" + hx(64)
add("openrouter-api-key", t,
    f"+ python eval.py --api-base https://openrouter.ai/api/v1 --api-key {t} --model "
    "meta-llama/llama-3-70b-instruct")
t = "xai-" + r(80)
add("xai-api-key", t, f"XAI_API_KEY={t}")
t = "nvapi-" + r(64, URLSAFE)
add("nvidia-nvapi-key", t, f"NGC_API_KEY={t}")
t = "nvapi-" + r(64, URLSAFE)
add("nvidia-nvapi-key", t, f"+ docker login nvcr.io -u '$oauthtoken' -p {t}")
t = "lsv2_pt_" + hx(32) + "_" + hx(10)
add("langsmith-api-key", t, f"LANGCHAIN_API_KEY={t}")
t = "sk-" + hx(32)
add("deepseek-api-key", t, f"DEEPSEEK_API_KEY={t}")
t = "sk_live_51" + r(97)
add("stripe-access-token", t, f"STRIPE_SECRET_KEY={t}")
t = "rk_live_51" + r(97)
add("stripe-access-token", t, f"billing-export: restricted key {t} loaded")
t = "SK" + hx(32)
add("twilio-api-key", t, f"alerts: paging on-call via twilio {t} -> +15550100")
t = hx(32)
add("twilio-auth-token", t, f"TWILIO_AUTH_TOKEN={t}")
t = "SG." + r(22, URLSAFE) + "." + r(43, URLSAFE)
add("sendgrid-api-token", t, f"SENDGRID_API_KEY={t}")
t = "SG." + r(22, URLSAFE) + "." + r(43, URLSAFE)
add("sendgrid-api-token", t,
    f"EmailNotifier(sender='ml-alerts@example.com', api_key='{t}', to=['oncall@example.com'])")
t = "key-" + hx(32)
add("mailgun-private-api-token", t, f"MAILGUN_API_KEY={t}")
t = hx(32) + "-us21"
add("mailchimp-api-key", t, f"MAILCHIMP_API_KEY={t}")
t = "shpat_" + hx(32)
add("shopify-access-token", t, f"SHOPIFY_ACCESS_TOKEN={t}")
t = "shpss_" + hx(32)
add("shopify-shared-secret", t, f"catalog-sync: shared secret {t}")
t = "dapi" + hx(32)
add("databricks-api-token", t, f"DATABRICKS_TOKEN={t}")
t = "dapi" + hx(32) + "-2"
add("databricks-api-token", t,
    f"mlflow.set_tracking_uri('databricks') host=https://adb-1234567890123456.7.azuredatabricks.net token={t}")
t = "dop_v1_" + hx(64)
add("digitalocean-pat", t, f"DIGITALOCEAN_ACCESS_TOKEN={t}")
t = uuid4()
add("heroku-api-key", t, f"HEROKU_API_KEY={t}")
t = "HRKU-AA" + r(58, URLSAFE)
add("heroku-api-key-v2", t, f"deploy: heroku container:release web using {t}")
t = "hvs.CAESI" + r(86, URLSAFE)
add("vault-service-token", t, f"VAULT_TOKEN={t}")
t = "hvs.CAESI" + r(86, URLSAFE)
add("vault-service-token", t, f"+ vault login -no-print {t}")
t = "hvb.AAAAAQ" + r(140, URLSAFE)
add("vault-batch-token", t, f"vault-agent: renewed batch token {t} ttl=1h")
t = r(14, ALNUM) + ".atlasv1." + r(67, URLSAFE)
add("hashicorp-tf-api-token", t, f"TF_TOKEN_app_terraform_io={t}")
t = r(14, ALNUM) + ".atlasv1." + r(67, URLSAFE)
add("hashicorp-tf-api-token", t, f'{{"credentials": {{"app.terraform.io": {{"token": "{t}"}}}}}}')
t = "dp.pt." + r(43)
add("doppler-api-token", t, f"DOPPLER_TOKEN={t}")
t = "glc_" + b64(json.dumps({"o": str(rng.randrange(10**5, 10**6)), "n": "stack-812-hm-write-ml",
                             "k": r(24), "m": {"r": "prod-us-east-0"}},
                            separators=(",", ":")).encode()).rstrip("=")
add("grafana-cloud-api-token", t, f"GRAFANA_CLOUD_TOKEN={t}")
t = "glsa_" + r(32) + "_" + hx(8)
add("grafana-service-account-token", t, f"dashboards: provisioning via {t}")
t = "NRAK-" + r(27, UALNUM)
add("new-relic-user-api-key", t, f"NEW_RELIC_API_KEY={t}")
t = "lin_api_" + r(40)
add("linear-api-key", t, f"LINEAR_API_KEY={t}")
t = "PMAK-" + hx(24) + "-" + hx(34)
add("postman-api-token", t, f"+ newman run collection.json --postman-api-key {t}")
t = "pul-" + hx(40)
add("pulumi-api-token", t, f"PULUMI_ACCESS_TOKEN={t}")
_sentry_claims = json.dumps({"iat": 1717400062.1, "url": "https://sentry.io",
                             "region_url": "https://us.sentry.io", "org": "acme-ml"},
                            separators=(",", ":")).encode()
t = "sntrys_" + b64(_sentry_claims).rstrip("=") + "_" + r(43, ALNUM + "+/")
add("sentry-org-token", t, f"SENTRY_AUTH_TOKEN={t}")
t = "sntryu_" + hx(64)
add("sentry-user-token", t, f"sentry-cli: authenticated with {t}")
t = "sbp_" + hx(40)
add("supabase-access-token", t, f"SUPABASE_ACCESS_TOKEN={t}")
t = "pscale_tkn_" + r(43, URLSAFE)
add("planetscale-api-token", t, f"PLANETSCALE_SERVICE_TOKEN={t}")
t = "pscale_pw_" + r(43, URLSAFE)
add("planetscale-password", t,
    f"DATABASE_URL=mysql://ml_app:{t}@aws.connect.psdb.cloud/evals?sslaccept=strict")
t = "squ_" + hx(40)
add("sonar-api-token", t, f"SONAR_TOKEN={t}")
t = "AKCp8" + r(68)
add("artifactory-api-key", t,
    f"+ pip install --index-url https://ml-bot:{t}@acme.jfrog.io/artifactory/api/pypi/"
    "pypi-remote/simple apex==0.1")
t = "AKCp8" + r(68)
add("artifactory-api-key", t, f"ARTIFACTORY_API_KEY={t}")
t = "LTAI5t" + r(18)
add("alibaba-access-key-id", t, f"ALIBABA_CLOUD_ACCESS_KEY_ID={t}")
t = r(30)
add("alibaba-secret-key", t, f"ALIBABA_CLOUD_ACCESS_KEY_SECRET={t}")
t = "AKID" + r(32)
add("tencent-cloud-secret-id", t, f"TENCENTCLOUD_SECRET_ID={t}")
t = r(32)
add("tencent-cloud-secret-key", t, f"TENCENTCLOUD_SECRET_KEY={t}")
t = "EAAC" + r(160)
add("facebook-page-access-token", t,
    f"GET https://graph.facebook.com/v19.0/me/accounts?access_token={t} -> 200")
t = "".join(rng.choice(DIG) for _ in range(16)) + "|" + r(27, URLSAFE)
add("facebook-access-token", t, f"FACEBOOK_APP_TOKEN={t}")
t = "sq0atp-" + r(22, URLSAFE)
add("square-access-token", t, f"SQUARE_ACCESS_TOKEN={t}")
t = "sq0csp-" + r(43, URLSAFE)
add("square-oauth-secret", t, f"square oauth app secret {t}")
t = "ntn_" + r(11, DIG) + r(35)
add("notion-api-token", t, f"NOTION_TOKEN={t}")
t = "AGE-SECRET-KEY-1" + r(58, BECH32)
add("age-secret-key", t, t)
t = "AGE-SECRET-KEY-1" + r(58, BECH32)
add("age-secret-key", t, f"SOPS_AGE_KEY={t}")
t = "00" + r(40, URLSAFE)
add("okta-access-token", t,
    f"send: b'GET /api/v1/groups?q=ml-researchers HTTP/1.1\\r\\nHost: acme.okta.com\\r\\n"
    f"Accept: application/json\\r\\nAuthorization: SSWS {t}\\r\\n\\r\\n'")
t = "xoxb-" + r(12, DIG) + "-" + r(13, DIG) + "-" + r(24)
add("slack-bot-token", t, f"SLACK_BOT_TOKEN={t}")
t = "xoxb-" + r(12, DIG) + "-" + r(13, DIG) + "-" + r(24)
add("slack-bot-token", t, f"slack_sdk.errors.SlackApiError: not_in_channel (token {t})")
t = "xoxp-" + r(12, DIG) + "-" + r(12, DIG) + "-" + r(13, DIG) + "-" + hx(32)
add("slack-user-token", t, f"posting run summary to #ml-training as {t}")
t = "xapp-1-A" + r(10, UALNUM) + "-" + r(13, DIG) + "-" + hx(64)
add("slack-app-token", t, f"SLACK_APP_TOKEN={t}")
t = "M" + r(23) + "." + r(6, URLSAFE) + "." + r(38, URLSAFE)
add("discord-bot-token", t, f"DISCORD_BOT_TOKEN={t}")
t = r(1, "123456789") + r(9, DIG) + ":AA" + r(33, URLSAFE)
add("telegram-bot-api-token", t, f"TELEGRAM_BOT_TOKEN={t}")
t = r(1, "123456789") + r(8, DIG) + ":AA" + r(33, URLSAFE)
add("telegram-bot-api-token", t,
    "requests.exceptions.ConnectionError: HTTPSConnectionPool(host='api.telegram.org', "
    f"port=443): Max retries exceeded with url: /bot{t}/sendMessage (Caused by "
    "NewConnectionError('<urllib3.connection.HTTPSConnection object at 0x7f3a2c1d9e10>: "
    "Failed to establish a new connection: [Errno 101] Network is unreachable'))")
t = "sha256~" + r(43, URLSAFE)
add("openshift-user-token", t,
    f"+ oc login --token={t} --server=https://api.gpu-cluster.example.com:6443")
t = "pnu_" + r(36)
add("prefect-api-token", t, f"PREFECT_API_KEY={t}")
t = "ops_eyJ" + r(320, ALNUM + "+/")
add("1password-service-account-token", t, f"OP_SERVICE_ACCOUNT_TOKEN={t}")
t = r(40, URLSAFE)
add("cloudflare-api-key", t, f"CLOUDFLARE_API_TOKEN={t}")
t = hx(32)
add("datadog-api-key", t, f"DD_API_KEY={t}")
t = hx(32)
add("azure-openai-api-key", t, f"AZURE_OPENAI_API_KEY={t}")
t = "CCIPAT_" + r(22) + "_" + hx(40)
add("circleci-personal-token", t, f"CIRCLE_TOKEN={t}")
t = r(27) + "_" + r(21)
add("ngrok-authtoken", t, f"+ ngrok config add-authtoken {t}")
t = r(6, LALNUM) + "." + r(16, LALNUM)
add("kubeadm-bootstrap-token", t,
    f"kubeadm join 10.0.4.10:6443 --token {t} --discovery-token-ca-cert-hash "
    f"sha256:{hx(64)}")

# prefixed formats that appear above only inside a context: once more, bare in
# prose (pasted into the wrong place, echoed, cat'ed, quoted by an error)
BARE_TEMPLATES = [
    "bash: {t}: command not found",
    "train.py: error: unrecognized arguments: {t}",
    "ValueError: invalid literal for int() with base 10: '{t}'",
    "error: pathspec '{t}' did not match any file(s) known to git",
    "ls: cannot access '{t}': No such file or directory",
    "{t}",
    "[launcher] node gpu-node-03 retrying with {t} (attempt 2/5)",
    "KeyError: '{t}'",
    "json.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0) in '{t}'",
    "++ cat /run/secrets/upload -> {t}",
]
BARE = [
    ("aws-access-token", lambda: "AKIA" + r(16, AWS_ID)),
    ("openai-api-key", lambda: openai_proj("sk-proj-")),
    ("anthropic-api-key", lambda: "sk-ant-api03-" + r(93, URLSAFE) + "AA"),
    ("perplexity-api-key", lambda: "pplx-" + r(48)),
    ("replicate-api-token", lambda: "r8_" + r(37)),
    ("nvidia-nvapi-key", lambda: "nvapi-" + r(64, URLSAFE)),
    ("openrouter-api-key", lambda: "sk-or-v1-" + hx(64)),
    ("xai-api-key", lambda: "xai-" + r(80)),
    ("langsmith-api-key", lambda: "lsv2_pt_" + hx(32) + "_" + hx(10)),
    ("huggingface-organization-api-token", lambda: "api_org_" + r(34, LET)),
    ("github-oauth", lambda: "gho_" + r(36)),
    ("github-app-token", lambda: "ghs_" + r(36)),
    ("github-refresh-token", lambda: "ghr_" + r(76)),
    ("gitlab-ptt", lambda: "glptt-" + hx(40)),
    ("gitlab-deploy-token", lambda: "gldt-" + r(20, URLSAFE)),
    ("gitlab-runner-authentication-token", lambda: "glrt-" + r(20, URLSAFE)),
    ("gitlab-rrt", lambda: "GR1348941" + r(20, URLSAFE)),
    ("gitlab-cicd-job-token", lambda: "glcbt-" + r(2, LALNUM) + "_" + r(20, URLSAFE)),
    ("bitbucket-app-password", lambda: "ATBB" + r(32)),
    ("npm-access-token", lambda: "npm_" + r(36)),
    ("pypi-upload-token", lambda: "pypi-AgEIcHlwaS5vcmcCJ" + r(140, URLSAFE)),
    ("rubygems-api-token", lambda: "rubygems_" + hx(48)),
    ("dockerhub-pat", lambda: "dckr_pat_" + r(27, URLSAFE)),
    ("stripe-access-token", lambda: "sk_live_51" + r(97)),
    ("sendgrid-api-token", lambda: "SG." + r(22, URLSAFE) + "." + r(43, URLSAFE)),
    ("shopify-access-token", lambda: "shpat_" + hx(32)),
    ("databricks-api-token", lambda: "dapi" + hx(32)),
    ("digitalocean-pat", lambda: "dop_v1_" + hx(64)),
    ("vault-service-token", lambda: "hvs.CAESI" + r(86, URLSAFE)),
    ("hashicorp-tf-api-token", lambda: r(14, ALNUM) + ".atlasv1." + r(67, URLSAFE)),
    ("doppler-api-token", lambda: "dp.pt." + r(43)),
    ("grafana-cloud-api-token", lambda: "glc_" + b64(json.dumps(
        {"o": str(rng.randrange(10**5, 10**6)), "n": "stack-812-hm-read-ml", "k": r(24),
         "m": {"r": "prod-eu-west-2"}}, separators=(",", ":")).encode()).rstrip("=")),
    ("new-relic-user-api-key", lambda: "NRAK-" + r(27, UALNUM)),
    ("linear-api-key", lambda: "lin_api_" + r(40)),
    ("pulumi-api-token", lambda: "pul-" + hx(40)),
    ("sentry-org-token", lambda: "sntrys_" + b64(_sentry_claims).rstrip("=") + "_" + r(43, ALNUM + "+/")),
    ("supabase-access-token", lambda: "sbp_" + hx(40)),
    ("planetscale-api-token", lambda: "pscale_tkn_" + r(43, URLSAFE)),
    ("planetscale-password", lambda: "pscale_pw_" + r(43, URLSAFE)),
    ("sonar-api-token", lambda: "squ_" + hx(40)),
    ("artifactory-api-key", lambda: "AKCp8" + r(68)),
    ("alibaba-access-key-id", lambda: "LTAI5t" + r(18)),
    ("tencent-cloud-secret-id", lambda: "AKID" + r(32)),
    ("notion-api-token", lambda: "ntn_" + r(11, DIG) + r(35)),
    ("slack-bot-token", lambda: "xoxb-" + r(12, DIG) + "-" + r(13, DIG) + "-" + r(24)),
    ("slack-app-token", lambda: "xapp-1-A" + r(10, UALNUM) + "-" + r(13, DIG) + "-" + hx(64)),
    ("square-access-token", lambda: "sq0atp-" + r(22, URLSAFE)),
    ("facebook-page-access-token", lambda: "EAAC" + r(150)),
    ("postman-api-token", lambda: "PMAK-" + hx(24) + "-" + hx(34)),
    ("1password-service-account-token", lambda: "ops_eyJ" + r(300, ALNUM + "+/")),
    ("prefect-api-token", lambda: "pnu_" + r(36)),
    ("circleci-personal-token", lambda: "CCIPAT_" + r(22) + "_" + hx(40)),
    ("azure-ad-client-secret", lambda: azure_secret()),
    ("gcp-oauth-access-token", lambda: "ya29.a0AXooCg" + r(150, URLSAFE)),
]
for i, (rule, make) in enumerate(BARE):
    t = make()
    add(rule, t, BARE_TEMPLATES[i % len(BARE_TEMPLATES)].format(t=t))

t = hx(40)
add("wandb-api-key", t,
    f"WANDB_API_KEY={t} torchrun --nproc_per_node 8 train.py --config configs/llama3_8b_sft.yaml")

# ==========================================================================
# kv family: unprefixed secrets named by a key
# ==========================================================================
p = pw(14, "!")
add("env-pgpassword", p, f"+ export PGPASSWORD={p}")
p = pw(12, "$!")
add("env-pgpassword", p,
    f"PGPASSWORD='{p}' psql -h pg.internal -U etl -d features -c 'select count(*) from runs'")
p = pw(16)
add("env-mysql-pwd", p, f"MYSQL_PWD={p}")
p = pw(20)
add("env-rediscli-auth", p, f"+ REDISCLI_AUTH={p}")
p = pw(12, "-")
add("env-passwd", p, f"PASSWD={p}")
p = pw(18)
add("env-password-suffix", p,
    f"+ docker run -d --name db -e MYSQL_ROOT_PASSWORD={p} -p 3306:3306 mysql:8.0")
p = pw(16, "_")
add("env-password-suffix", p, f"      POSTGRES_PASSWORD: {p}")
p = r(40)
add("env-password-suffix", p, f"MINIO_ROOT_PASSWORD={p}")
p = pw(14)
add("env-password-suffix", p, f"MLFLOW_TRACKING_PASSWORD={p}")
p = pw(14, ".")
add("env-password-suffix", p, f"LDAP_BIND_PASSWORD={p}")
p = passphrase()
add("env-password-quoted-spaces", p, f'export DB_PASSWORD="{p}"')
p = pw(12, '"')
add("env-password-quoted-dquote", p, f"MYSQL_PASSWORD='{p}'")
p = pw(12, "%")
add("env-password-percent", p, f"REDIS_PASSWORD={p}")
p = pw(12, "/#")
add("env-password-slash-hash", p, f"SMTP_PASSWORD='{p}'")
p = hx(128)
add("env-secret-key-base", p, f"SECRET_KEY_BASE={p}")
p = hx(64)
add("env-secret-suffix", p, f"JWT_SECRET={p}")
p = r(50, URLSAFE)
add("env-secret-suffix", p, f"CLEARML_API_SECRET_KEY={p}")
p = r(45)
add("env-access-token-secret", p, f"ACCESS_TOKEN_SECRET={p}")
p = r(25)
add("env-api-key-suffix", p, f"COMET_API_KEY={p}")
p = r(22)
add("env-api-key-suffix", p, f"MODAL_TOKEN_SECRET={p}")
p = b64(json.dumps({"api_address": "https://app.neptune.ai",
                    "api_url": "https://app.neptune.ai", "api_key": uuid4()}).encode())
add("env-token-suffix", p, f"NEPTUNE_API_TOKEN={p}")
p = r(40, URLSAFE)
add("env-token-suffix", p, f"  MLFLOW_TRACKING_TOKEN: {p}")
p = passphrase(3)
add("env-passphrase-suffix", p, f"SSH_KEY_PASSPHRASE='{p}'")
p = b64(rbytes(32))
add("env-encryption-key", p, f"ENCRYPTION_KEY={p}")
p = pw(16, "&")
add("declare-x-password", p, f'declare -x RABBITMQ_DEFAULT_PASS="{p}"')
p = r(40, URLSAFE)
add("os-environ-token", p,
    "os.environ=environ({'SHELL': '/bin/bash', 'SLURM_JOB_ID': '4815162', "
    "'SLURM_NODELIST': 'gpu-node-[01-08]', 'CUDA_VISIBLE_DEVICES': '0,1,2,3,4,5,6,7', "
    "'NCCL_IB_HCA': 'mlx5_0,mlx5_1,mlx5_2,mlx5_3', 'NCCL_DEBUG': 'INFO', "
    "'PYTHONPATH': '/workspace/Megatron-LM', 'MASTER_ADDR': 'gpu-node-01', "
    "'MASTER_PORT': '29500', 'WORLD_SIZE': '64', 'HF_HOME': '/data/hf', "
    "'TOKENIZERS_PARALLELISM': 'false', 'WANDB_PROJECT': 'llama3-sft', "
    f"'LAUNCHER_API_TOKEN': '{p}'}})")
p = pw(14, "!")
add("kv-camelcase-dbpassword", p,
    f"AppConfig {{ dbHost: 'pg.internal', dbPort: 5432, dbUser: 'etl', dbPassword: '{p}' }}")
p = r(40, URLSAFE + "~.")
add("kv-camelcase-clientsecret", p,
    f"OAuthConfig(clientId=ml-portal, clientSecret={p}, redirectUri=https://portal.example.com/cb)")
p = r(32)
add("kv-camelcase-secretkey", p, f"minioClient = Minio(endpoint=minio.ml.svc:9000, accessKey=ml-writer, secretKey={p})")
p = r(50, LALNUM + "!@#$%^&*(-_=+)")
add("kv-django-secret-key", p, f"SECRET_KEY = '{p}'")
p = pw(14, "@")
add("py-dict-password", p,
    "psycopg2.connect kwargs: " + repr({"host": "pg.internal", "port": 5432, "user": "etl",
                                        "password": p, "dbname": "features"}))
p = pw(16)
add("py-dict-password", p,
    "uvicorn config: " + repr({"host": "0.0.0.0", "port": 8443, "ssl_keyfile": "/etc/ssl/private/srv.key",
                               "ssl_keyfile_password": p, "workers": 4}))
p = pw(13, "'")
add("py-dict-password", p, "db settings: " + repr({"user": "labeler", "password": p}))
p = pw(14)
add("py-namespace-password", p,
    f"Namespace(db_host='10.0.3.7', db_password='{p}', epochs=3, lr=0.0002, seed=42)")
p = pw(10, ": #")
add("yaml-password-quoted-hash-colon", p, f'  password: "{p}"')
p = hx(32)
add("yaml-api-key", p, f"  api_key: {p}")
p = pw(15)
add("json-password", p,
    json.dumps({"ts": "2024-06-03T09:14:22.101Z", "level": "DEBUG", "msg": "db config",
                "db": {"host": "pg.internal", "user": "etl", "password": p}}))
p = pw(15, "=")
add("json-escaped-password", p,
    json.dumps({"level": "info", "msg": "loaded settings",
                "settings": json.dumps({"redis_password": p, "port": 6379})}))
p = pw(12, "!")
add("hydra-override-password", p,
    f"[2024-06-03 09:14:22,101][__main__][INFO] - overrides: ['trainer.devices=8', "
    f"'+db.password={p}', 'seed=1234']")
p = pw(14)
add("libpq-dsn-password", p,
    f"DEBUG:db:connecting with dsn 'host=pg.internal port=5432 dbname=features user=etl "
    f"password={p} sslmode=require'")
p = pw(14)
add("libpq-dsn-password", p,
    f'    conn = psycopg2.connect("host=10.0.3.7 dbname=metrics user=writer password={p}")')
p = b64(pw(14).encode())
add("kubernetes-secret-yaml", p, f"  password: {p}")
p = hx(40)
add("git-credential-password", p, f"password={p}")
p = pw(14)
add("pgpass-password", p, f"pg.internal:5432:features:etl:{p}")
p = pw(16)
add("netrc-password", p, f"machine nexus.internal login ml-ci password {p}")
p = r(64, ALNUM + "+/")
add("kafka-sasl-jaas-password", p,
    "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
    f'username="{r(16, UALNUM)}" password="{p}";')
p = r(64, ALNUM + "+/")
add("kafka-sasl-password", p,
    "producer config: " + repr({"bootstrap.servers": "pkc-4r297.us-west2.gcp.confluent.cloud:9092",
                                "security.protocol": "SASL_SSL", "sasl.mechanisms": "PLAIN",
                                "sasl.username": "ML-EVENTS-WRITER", "sasl.password": p}))
p = r(48, URLSAFE)
add("http-authorization-bearer", p,
    "send: b'POST /v1/chat/completions HTTP/1.1\\r\\nHost: llm-gateway.internal:8443\\r\\n"
    "User-Agent: python-requests/2.32.3\\r\\nAccept-Encoding: gzip, deflate\\r\\nAccept: */*"
    "\\r\\nConnection: keep-alive\\r\\nContent-Type: application/json\\r\\n"
    f"Authorization: Bearer {p}\\r\\nContent-Length: 1893\\r\\n\\r\\n'")
p = r(32, LALNUM)
add("http-cookie-session", p,
    f"DEBUG:httpx:request headers: [('host', 'label-studio.internal'), ('cookie', 'sessionid={p}')]")
p = r(64, URLSAFE)
add("http-set-cookie-session", p, f"header: Set-Cookie: session={p}; Path=/; HttpOnly; Secure")
p = r(40)
add("http-x-api-key", p,
    f"headers={{'Content-Type': 'application/json', 'X-API-Key': '{p}', 'User-Agent': 'evalkit/0.4'}}")
p = pw(14)
add("ini-password", p, f"password = {p}")

# ==========================================================================
# url family: URLs, DSNs, connection strings, webhooks
# ==========================================================================
p = pw(10, "@")
add("url-userinfo-at-in-password", p, f"DATABASE_URL=postgres://admin:{p}@db.internal:5432/mlmeta")
p = pw(10, "@@")
add("url-userinfo-at-in-password", p,
    f"sqlalchemy.exc.ArgumentError: Could not parse SQLAlchemy URL from string "
    f"'mysql://ml:{p}@mysql.internal:3306/registry'")
p = urllib.parse.quote(pw(10, "@/#%"), safe="")
add("url-userinfo-percent-encoded", p,
    f'    engine = create_engine("postgresql+psycopg2://etl:{p}@pg.internal:5432/features", '
    "pool_pre_ping=True)")
p = pw(10, ":")
add("url-userinfo-colon-in-password", p,
    f"INFO:alembic.runtime.migration: using url mysql+pymysql://ml:{p}@mysql.internal:3306/registry")
p = r(32)
add("url-password-only", p, f"REDIS_URL=redis://:{p}@redis-master.ml.svc:6379/0")
p = r(24)
add("url-password-only", p, f"celery broker: rediss://:{p}@cache.internal:6380/1?ssl_cert_reqs=required")
p = r(34)
add("url-userinfo-password", p,
    f"redis.exceptions.ConnectionError: Error 110 connecting to rediss://default:{p}"
    "@usw1-able-gecko-31337.upstash.io:6379. Connection timed out.")
p = pw(16)
add("url-userinfo-password", p,
    f"Connecting to mongodb+srv://trainer:{p}@cluster0.ab1cd.mongodb.net/"
    "?retryWrites=true&w=majority&appName=ml-runs")
p = pw(14)
add("url-userinfo-password", p, f"CELERY_BROKER_URL=amqp://ml-worker:{p}@rabbitmq.internal:5672//")
p = pw(16)
add("url-userinfo-password", p, f"MLFLOW_TRACKING_URI=https://mlflow:{p}@mlflow.internal.example.com")
p = pw(16)
add("url-userinfo-password", p,
    f"elasticsearch.exceptions.ConnectionError: ConnectionError(<urllib3.connection.HTTPSConnection "
    f"object at 0x7f3a2c1d9e10>) caused by: https://elastic:{p}@es.internal:9200/_bulk")
p = pw(12)
add("url-userinfo-password", p, f"clickhouse_url: clickhouse://default:{p}@ch.internal:9000/metrics")
p = pw(12)
add("url-userinfo-password", p, f"+ wget -q ftp://mirror:{p}@ftp.internal/datasets/c4-en.tar")
p = pw(16)
add("url-userinfo-password", p, f"EMAIL_URL=smtps://alerts%40example.com:{p}@smtp.gmail.com:465")
p = pw(12)
add("proxy-url-password", p, f"https_proxy=http://svc-ml:{p}@proxy.corp.example.com:3128")
p = pw(12, "!")
add("proxy-url-password", p, f"+ export HTTP_PROXY=http://jdoe:{p}@10.0.0.5:8080")
p = r(20, URLSAFE)
add("pip-index-url-password", p,
    f"Looking in indexes: https://pypi.org/simple, https://ml-ci:{p}@nexus.internal/repository/pypi-internal/simple")
p = pw(14)
add("jdbc-password-param", p,
    f"24/06/03 09:14:22 INFO JDBCRelation: url=jdbc:postgresql://pg.internal:5432/features?user=spark&password={p}&ssl=true")
p = pw(14, "!")
add("jdbc-sqlserver-password", p,
    f"jdbc:sqlserver://sql.internal:1433;databaseName=labels;user=etl;password={p};encrypt=true;"
    "trustServerCertificate=false")
p = pw(12, ";=")
add("odbc-pwd-braced", p,
    "pyodbc conn_str: Driver={ODBC Driver 18 for SQL Server};Server=tcp:ml-sql.database.windows.net,1433;"
    f"Database=labels;Uid=etl;Pwd={{{p}}};Encrypt=yes;TrustServerCertificate=no;")
p = b64(rbytes(64))
add("azure-storage-account-key", p,
    f"AZURE_STORAGE_CONNECTION_STRING=DefaultEndpointsProtocol=https;AccountName=acmemlartifacts;"
    f"AccountKey={p};EndpointSuffix=core.windows.net")
p = b64(rbytes(32))
add("azure-servicebus-shared-access-key", p,
    "Using connection string: Endpoint=sb://acme-ml-events.servicebus.windows.net/;"
    f"SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey={p}")
p = urllib.parse.quote(b64(rbytes(32)), safe="")
add("azure-sas-signature", p,
    "Downloading https://acmemlartifacts.blob.core.windows.net/ckpt/run-0042/model-00001-of-00004."
    "safetensors?sv=2022-11-02&ss=b&srt=o&sp=r&se=2024-06-04T09:14:22Z&st=2024-06-03T01:14:22Z"
    f"&spr=https&sig={p}")
p = hx(512)
add("gcs-signed-url-signature", p,
    "GET https://storage.googleapis.com/ml-datasets/shards/train-00042.tar?X-Goog-Algorithm="
    "GOOG4-RSA-SHA256&X-Goog-Credential=loader%40acme-ml.iam.gserviceaccount.com%2F20240603%2Fauto"
    "%2Fstorage%2Fgoog4_request&X-Goog-Date=20240603T091422Z&X-Goog-Expires=3600"
    f"&X-Goog-SignedHeaders=host&X-Goog-Signature={p}")
p = hx(64)
add("s3-presigned-url-signature", p,
    "urllib3: GET https://ml-ckpts.s3.us-west-2.amazonaws.com/llama3-70b/step_12000/optim.pt?"
    "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=ckpt-reader%2F20240603%2Fus-west-2%2Fs3%2F"
    "aws4_request&X-Amz-Date=20240603T091422Z&X-Amz-Expires=3600&X-Amz-SignedHeaders=host"
    f"&X-Amz-Signature={p}")
p = "T" + r(9, UALNUM) + "/B" + r(9, UALNUM) + "/" + r(24)
add("slack-webhook-url", p,
    f"requests.exceptions.HTTPError: 404 Client Error: Not Found for url: https://hooks.slack.com/services/{p}")
p = "T" + r(8, UALNUM) + "/B" + r(10, UALNUM) + "/" + r(24)
add("slack-webhook-url", p, f"SLACK_WEBHOOK_URL=https://hooks.slack.com/services/{p}")
p = r(19, DIG) + "/" + r(68, URLSAFE)
add("discord-webhook-url", p,
    f"notify: POST https://discord.com/api/webhooks/{p} -> 204 (run llama3-sft finished)")
p = (uuid4() + "@" + uuid4() + "/IncomingWebhook/" + hx(32) + "/" + uuid4())
add("microsoft-teams-webhook", p, f"TEAMS_WEBHOOK=https://acme.webhook.office.com/webhookb2/{p}")
p = r(43, URLSAFE)
add("azure-logic-app-webhook-sig", p,
    f"alert_url: https://prod-27.westus.logic.azure.com:443/workflows/{hx(32)}/triggers/manual/paths/"
    f"invoke?api-version=2016-06-01&sp=%2Ftriggers%2Fmanual%2Frun&sv=1.0&sig={p}")
p = r(7, DIG) + "/" + r(7, LALNUM)
add("zapier-webhook-url", p, f"ZAPIER_HOOK=https://hooks.zapier.com/hooks/catch/{p}/")
p = r(40, URLSAFE)
add("url-query-access-token", p,
    f'DEBUG:urllib3.connectionpool:https://ml-registry.internal:443 "GET /api/v2/models?access_token={p}'
    ' HTTP/1.1" 200 5123')
p = r(2, LOW) + "-" + uuid4()
add("anaconda-channel-token", p,
    f"+ conda install -y -c https://conda.anaconda.org/t/{p}/acme-ml apex=0.1")
p = hx(32)
add("sentry-dsn-secret", p, f"SENTRY_DSN=https://{hx(32)}:{p}@sentry.io/4507123")
p = hx(48)
add("jupyter-server-token", p, f"[I 2024-06-03 09:14:22.101 ServerApp]     http://127.0.0.1:8888/lab?token={p}")
p = hx(48)
add("jupyter-server-token", p,
    f"+ jupyter lab --ip=0.0.0.0 --port=8888 --no-browser --allow-root --ServerApp.token={p}")

# ==========================================================================
# cli family: unprefixed secrets found by a flag or position
# ==========================================================================
p = pw(10)
add("cli-curl-user", p,
    f"+ curl -fsSL -u alice:{p} https://nexus.internal/repository/raw/datasets/manifest.json")
p = pw(10, " ")
add("cli-curl-user", p, f"+ curl --user 'svc-ml:{p}' -O https://nexus.internal/repository/raw/ckpt.tar")
p = r(40, URLSAFE)
add("curl-auth-header", p,
    f'curl -sS -H "Authorization: Bearer {p}" https://llm-gateway.internal:8443/v1/models')
p = pw(16)
add("cli-docker-login-p", p, f"+ docker login -u ci-bot -p {p} registry.internal:5000")
p = pw(14)
add("cli-mysql-p-attached", p, f"+ mysql -h mysql.internal -uroot -p{p} -e 'SHOW DATABASES'")
p = pw(14, "#")
add("cli-mysql-password-eq", p,
    f"+ mysqldump --single-transaction -h mysql.internal -u backup --password={p} registry")
p = pw(12)
add("cli-sshpass-p", p, f"+ sshpass -p {p} ssh -o StrictHostKeyChecking=no ubuntu@gpu-node-07 nvidia-smi")
p = pw(14)
add("cli-ldapsearch-w", p,
    f"+ ldapsearch -x -H ldaps://ldap.corp.example.com -D cn=svc-ml,ou=svc,dc=example,dc=com -w {p} "
    "-b ou=people,dc=example,dc=com uid=jdoe")
p = r(32)
add("cli-redis-cli-a", p, f"+ redis-cli -h redis.internal -p 6379 -a {p} --no-auth-warning ping")
p = pw(14, "!")
add("cli-sqlcmd-P", p, f"+ sqlcmd -S sql.internal,1433 -U sa -P {p} -Q 'SELECT @@VERSION'")
p = pw(14)
add("cli-mongosh-p", p,
    f"+ mongosh --host mongo.internal -u admin -p {p} --authenticationDatabase admin --eval 'db.runs.count()'")
p = pw(16)
add("cli-ray-redis-password", p,
    f"+ ray start --head --port=6379 --redis-password={p} --num-gpus=8 --dashboard-host=0.0.0.0")
p = r(32)
add("cli-vllm-api-key", p,
    "+ vllm serve meta-llama/Meta-Llama-3-70B-Instruct --tensor-parallel-size 8 --max-model-len 8192 "
    f"--api-key {p}")
p = r(48)
add("cli-flag-api-key-eq", p,
    f"[launcher] cmd: python eval.py --model gpt-4o --judge-api-key={p} --num-samples 500")
p = pw(14)
add("cli-openssl-pass", p,
    f"+ openssl pkcs12 -export -in client.crt -inkey client.key -out client.p12 -passout pass:{p}")
p = passphrase(3)
add("cli-gpg-passphrase", p,
    f"gpg --batch --yes --pinentry-mode loopback --passphrase '{p}' -d /secrets/dataset-key.gpg")
p = pw(14)
add("cli-7z-p", p, f"+ 7z a -p{p} -mhe=on /backup/ckpt-run-0042.7z /ckpt/run-0042")
p = r(40)
add("cli-mc-alias-secret-key", p, f"+ mc alias set ml http://minio.internal:9000 ml-writer {p}")
p = pw(12)
add("cli-htpasswd-b", p, f"+ htpasswd -b -c /etc/nginx/.htpasswd tensorboard {p}")
p = pw(12)
add("cli-smbclient-user-percent", p, f"+ smbclient //nas.internal/datasets -U ml%{p} -c 'ls'")
p = pw(14)
add("argv-list-password", p, f"sys.argv = ['train.py', '--db-password', '{p}', '--epochs', '3']")
p = pw(16)
add("argv-list-docker-login-p", p,
    f"subprocess.CalledProcessError: Command '['docker', 'login', '-u', 'ci-bot', '-p', '{p}', "
    "'nvcr.io']' returned non-zero exit status 1.")
p = pw(12)
add("cli-sqlplus-slash", p, f"+ sqlplus -s ml_reader/{p}@//oradb.internal:1521/FEAT @export_labels.sql")
p = passphrase(3)
add("cli-ssh-keygen-N", p,
    f"+ ssh-keygen -t ed25519 -N '{p}' -f /root/.ssh/deploy_key -C ci@gpu-node-01")
p = pw(14)
add("cli-wget-http-password", p,
    f"+ wget --http-user=ml --http-password={p} https://nexus.internal/repository/raw/tokenizer.model")
p = pw(12, "'")
add("cli-password-flag-quoted", p,
    f'Launching: python export_to_db.py --password "{p}" --table runs --batch-size 500')
p = r(40, B64)
add("cli-rclone-s3-secret", p,
    f"+ rclone copy /ckpt/run-0042 s3remote:ml-ckpts/run-0042 --s3-access-key-id ml-writer "
    f"--s3-secret-access-key {p} --transfers 32")
p = pw(14)
add("cli-docker-login-p", p,
    "+ scontrol show job 4815162 | grep Command= -> Command=/home/jdoe/launch.sh --registry "
    f"registry.internal:5000 --registry-user ci-bot -p {p}")

# ==========================================================================
# blob family: private keys, JWTs, base64 credential blobs
# ==========================================================================
body = der_body("rsa")
add("private-key", body,
    f"+ echo '-----BEGIN RSA PRIVATE KEY-----{body}-----END RSA PRIVATE KEY-----'")
body = chunks(der_body("pkcs8"))
pem = "-----BEGIN PRIVATE KEY-----\n" + "\n".join(body) + "\n-----END PRIVATE KEY-----\n"
sa = {"type": "service_account", "project_id": "acme-ml", "private_key_id": hx(40),
      "private_key": pem, "client_email": "trainer@acme-ml.iam.gserviceaccount.com",
      "client_id": r(21, DIG), "auth_uri": "https://accounts.google.com/o/oauth2/auth",
      "token_uri": "https://oauth2.googleapis.com/token"}
add("private-key", "\\n".join(body), json.dumps(sa))
body = chunks(der_body("ec"))
pem = "-----BEGIN EC PRIVATE KEY-----\n" + "\n".join(body) + "\n-----END EC PRIVATE KEY-----\n"
add("private-key", "\\n".join(body),
    "tls settings: " + repr({"cert": "/etc/ssl/certs/client.crt", "key_pem": pem, "verify": True}))
body = der_body("openssh")
add("private-key", body,
    f"DEPLOY_KEY=-----BEGIN OPENSSH PRIVATE KEY----- {body} -----END OPENSSH PRIVATE KEY-----")
body = der_body("pgp")
add("private-key", body,
    '"Env": ["PATH=/usr/local/sbin:/usr/bin", "GPG_PRIVATE_KEY=-----BEGIN PGP PRIVATE KEY BLOCK-----'
    f'\\n\\n{body}\\n={r(4, B64)}\\n-----END PGP PRIVATE KEY BLOCK-----\\n"]')
body = der_body("enc")
add("private-key", body,
    f"ssl_key=-----BEGIN ENCRYPTED PRIVATE KEY-----{body}-----END ENCRYPTED PRIVATE KEY-----")
fake_pem = ("-----BEGIN RSA PRIVATE KEY-----\n" + "\n".join(chunks(der_body("rsa")))
            + "\n-----END RSA PRIVATE KEY-----\n")
p = b64(fake_pem.encode())
add("kubeconfig-client-key-data", p, f"    client-key-data: {p}")
sa_full = dict(sa)
sa_full["private_key_id"] = hx(40)
sa_full["private_key"] = ("-----BEGIN PRIVATE KEY-----\n" + "\n".join(chunks(der_body("pkcs8")))
                          + "\n-----END PRIVATE KEY-----\n")
p = b64(json.dumps(sa_full, indent=2).encode())
add("gcp-service-account-json-base64", p, f"GOOGLE_CREDENTIALS_B64={p}")
p = k8s_sa_jwt("ml-train", "trainer")
add("kubernetes-service-account-token", p, f"    token: {p}")
p = k8s_sa_jwt("ml-serve", "vllm")
add("kubernetes-service-account-token", p,
    f"+ kubectl --server=https://10.0.4.10:6443 --token={p} -n ml-serve get pods")
p = k8s_sa_jwt("kube-system", "gpu-operator")
add("kubernetes-service-account-token", p, f"token:      {p}")
p = jwt({"sub": "jdoe@example.com", "iss": "https://login.example.com", "aud": "ml-portal",
         "iat": 1717406062, "exp": 1717409662, "scope": "runs:write"})
add("jwt", p, f"[auth] {p} (expires 2024-06-03T10:14:22Z)")
p = jwt({"iss": "supabase", "ref": r(20, LOW), "role": "service_role",
         "iat": 1717406062, "exp": 2032982062}, alg="HS256")
add("jwt", p, f"SUPABASE_SERVICE_ROLE_KEY={p}")
p = jwt({"sub": "svc-eval", "tenant": "acme-ml", "iat": 1717406062, "exp": 1717492462})
add("jwt", p,
    "send: b'GET /v1/runs?limit=50 HTTP/1.1\\r\\nHost: tracker.internal\\r\\nUser-Agent: "
    f"python-requests/2.32.3\\r\\nAccept: */*\\r\\nAuthorization: Bearer {p}\\r\\n\\r\\n'")
p = jwt({"ac": "[{\"Scope\":\"refs/heads/main\",\"Permission\":3}]", "iss": "vstoken.actions.githubusercontent.com",
         "aud": "vso:" + uuid4(), "nbf": 1717406062, "exp": 1717428262})
add("jwt", p, f"ACTIONS_RUNTIME_TOKEN={p}")
p = jwt({"sub": "jdoe", "iat": 1717406062}, alg="HS256")
add("jwt", p, f"cookie: access_token_cookie={p}; csrf_access_token={uuid4()}")
p = b64(f"ci-bot:{pw(16)}".encode())
add("docker-config-auth", p, f'                        "auth": "{p}"')
p = b64(f"_json_key_base64:{r(60, B64)}".encode())
add("docker-config-auth", p,
    f'{{"auths": {{"us-docker.pkg.dev": {{"auth": "{p}"}}}}}}')
p = b64(f"ml-ci:{pw(14)}".encode())
add("http-basic-auth", p,
    "send: b'GET /repository/pypi-internal/simple/flash-attn/ HTTP/1.1\\r\\nHost: nexus.internal"
    f"\\r\\nAccept: */*\\r\\nAuthorization: Basic {p}\\r\\n\\r\\n'")
p = b64(f"x-access-token:{'ghs_' + r(36)}".encode())
add("http-basic-auth", p,
    f'+ git -c http.extraheader="AUTHORIZATION: basic {p}" fetch --depth=1 origin main')


# ==========================================================================
# more key/value, URL, CLI and blob shapes
# ==========================================================================
p = pw(7)
add("env-password-short", p, f"password={p}")
p = r(8, DIG)
add("env-password-digits", p, f"DB_PASSWORD={p}")
p = rng.choice(WORDS).capitalize() + r(4, DIG) + "!"
add("env-password-wordlike", p, f"+ export ADMIN_PASSWORD={p}")
p = pw(14)
add("env-password-suffix", p, f"REDIS_PASS={p}")
p = pw(14)
add("yaml-password", p, f"  db_password: {p}")
p = pw(12)
add("yaml-passwd", p, f"passwd: {p}")
p = r(32, URLSAFE)
add("yaml-secret", p, f"  secret: {p}")
p = r(40, URLSAFE)
add("yaml-token", p, f"  token: {p}")
p = r(36, URLSAFE)
add("toml-api-token", p, f'api_token = "{p}"')
p = pw(14)
add("logfmt-password", p,
    f'time=2024-06-03T09:14:22Z level=debug msg="opening db" host=pg.internal user=etl password={p} pool=8')
p = r(40, B64)
add("logfmt-secret-key", p,
    f'level=debug msg="s3 client" endpoint=http://minio.internal:9000 access_key=ml-writer secret_key={p}')
p = r(40, URLSAFE + "~.")
add("form-client-secret", p,
    "send: b'grant_type=client_credentials&client_id=ml-portal&scope=runs.write"
    f"&client_secret={p}'")
p = r(64, URLSAFE)
add("json-refresh-token", p,
    'reply: {"token_type": "Bearer", "expires_in": 3600, "scope": "offline_access", '
    f'"refresh_token": "{p}"}}')
p = r(43, URLSAFE)
add("py-dict-access-token", p,
    f"oauth response: {{'access_token': '{p}', 'token_type': 'Bearer', 'expires_in': 3599}}")
p = pw(14)
add("py-kwargs-passwd", p,
    f"pymysql.connect(host='mysql.internal', user='ml', passwd='{p}', db='registry', port=3306)")
p = r(39, URLSAFE)
add("kv-camelcase-apikey", p,
    f'{{"projectId": "acme-ml-eval", "apiKey": "{p}", "region": "us-central1"}}')
p = r(48, URLSAFE)
add("kv-camelcase-accesstoken", p,
    f"LabelStudioClient{{baseUrl=https://label.internal, accessToken={p}, timeoutMs=30000}}")
p = pw(16)
add("java-properties-password", p, f"spring.datasource.password={p}")
p = r(32, HEX)
add("http-x-auth-token", p, f"> X-Auth-Token: {p}")
p = hx(40)
add("http-authorization-token", p,
    f"DEBUG:github.Requester:GET https://ghe.internal/api/v3/repos/ml/data {{'Authorization': 'token {p}', "
    "'User-Agent': 'PyGithub/Python'}")
p = pw(14)
add("go-struct-password", p,
    f"db config: &{{Host:pg.internal Port:5432 User:etl Password:{p} DBName:features SSLMode:require}}")
p = r(32, URLSAFE)
add("env-master-key", p, f"MEILI_MASTER_KEY={p}")
p = pw(16)
add("docker-env-password", p,
    f'            "Env": ["PATH=/usr/local/bin:/usr/bin", "DB_PASSWORD={p}", "PYTHONUNBUFFERED=1"],')
p = pw(16)
add("kubectl-describe-env-password", p, f"      DB_PASSWORD:             {p}")
p = pw(14)
add("systemd-environment-password", p, f"Environment=PGPASSWORD={p} PGHOST=pg.internal")
p = pw(12)
add("ansible-become-pass", p,
    f"gpu-node-07 ansible_host=10.0.4.17 ansible_user=ubuntu ansible_become_pass={p}")
p = passphrase(3)
add("env-private-key-passphrase", p, f"PRIVATE_KEY_PASSPHRASE='{p}'")
p = r(24)
add("http-authorization-bearer", p,
    f"request headers: {{'Authorization': 'Bearer {p}', 'Content-Type': 'application/json'}}")

p = pw(14)
add("url-userinfo-multihost", p,
    f"DATABASE_URL=postgresql://ml:{p}@pg-0.internal:5432,pg-1.internal:5432/features"
    "?target_session_attrs=read-write")
p = pw(14)
add("url-userinfo-multihost", p,
    f"MONGO_URL=mongodb://root:{p}@mongo-0.mongo:27017,mongo-1.mongo:27017/?replicaSet=rs0&authSource=admin")
p = r(40, URLSAFE)
add("pip-requirement-git-url-token", p,
    f"Collecting evalkit@ git+https://ml-ci:{p}@git.internal/ml/evalkit.git@v0.4.2")
p = r(32)
add("url-query-api-key", p,
    f"GET https://api.weather-data.example.com/v1/history?lat=37.4&lon=-122.1&apikey={p}&format=json -> 200")
p = pw(14)
add("url-userinfo-password", p, f"  - targets: ['http://prom:{p}@10.0.4.17:9400/metrics']")
p = pw(14)
add("url-userinfo-password", p, f"amqps://ml-events:{p}@b-1a2b3c4d.mq.us-east-1.amazonaws.com:5671")
p = pw(14)
add("url-userinfo-password", p, f"nats: connecting to nats://trainer:{p}@nats.internal:4222")

p = pw(12)
add("cli-zip-P", p, f"+ zip -r -P {p} /backup/eval-preds.zip /workspace/preds")
p = pw(14)
add("cli-influx-password", p,
    f"+ influx -host influx.internal -username admin -password {p} -execute 'SHOW DATABASES'")
p = pw(14)
add("cli-rabbitmqctl-add-user", p, f"+ rabbitmqctl add_user ml-worker {p}")
p = pw(16)
add("cli-vault-kv-put", p, f"+ vault kv put secret/ml/db username=etl password={p}")
p = pw(16)
add("cli-kubectl-from-literal", p,
    f"+ kubectl create secret generic db-creds -n ml-train --from-literal=username=etl "
    f"--from-literal=password={p}")
p = pw(12)
add("cli-mount-cifs-password", p,
    f"+ mount -t cifs //nas.internal/datasets /mnt/datasets -o username=ml,password={p},vers=3.0")
p = pw(12)
add("cli-lftp-u", p, f"+ lftp -u mirror,{p} sftp://ftp.internal -e 'mirror /datasets /data; quit'")
p = pw(14)
add("cli-java-sysprop-password", p,
    f"+ java -Djavax.net.ssl.keyStore=/etc/ssl/client.jks -Djavax.net.ssl.keyStorePassword={p} "
    "-jar feature-loader.jar")
p = r(40, B64)
add("cli-spark-conf-secret-key", p,
    "+ spark-submit --master k8s://https://10.0.4.10:6443 --conf spark.hadoop.fs.s3a.access.key=ml-writer "
    f"--conf spark.hadoop.fs.s3a.secret.key={p} build_shards.py")
p = pw(16)
add("cli-helm-set-password", p,
    f"+ helm upgrade --install mlflow ./charts/mlflow -n ml --set postgresql.auth.password={p}")

body = chunks(der_body("openssh"), 70)
pem = "-----BEGIN OPENSSH PRIVATE KEY-----\n" + "\n".join(body) + "\n-----END OPENSSH PRIVATE KEY-----\n"
add("private-key", "\\n".join(body), f"paramiko: loading key_data={pem!r}")
p = jwt({"aud": "https://management.azure.com/", "iss": f"https://sts.windows.net/{uuid4()}/",
         "iat": 1717406062, "exp": 1717410262, "appid": uuid4(), "oid": uuid4()}, kid=r(27, URLSAFE))
add("jwt", p, f'  "accessToken": "{p}",')
p = jwt({"aud": "https://ml-portal.internal", "azp": r(21, DIG), "email": "trainer@acme-ml.iam.gserviceaccount.com",
         "exp": 1717409662, "iat": 1717406062, "iss": "https://accounts.google.com", "sub": r(21, DIG)},
        kid=hx(40))
add("jwt", p, p)
p = jwt({"sub": "svc-eval", "iat": 1717406062, "exp": 1717492462})
add("jwt", p, f"oauth response: {{'id_token': '{p}', 'token_type': 'Bearer', 'expires_in': 3600}}")
p = jwt({"sub": "jdoe", "role": "admin", "iat": 1717406062}, alg="HS256")
add("jwt", p, f"header: Set-Cookie: token={p}; Path=/; HttpOnly")
p = b64(json.dumps({"auths": {"registry.internal:5000": {
    "auth": b64(f"ci-bot:{pw(16)}".encode())}}}).encode())
add("dockerconfigjson-base64", p, f"  .dockerconfigjson: {p}")
p = b64(f"svc-ml:{pw(14)}".encode())
add("http-basic-auth", p,
    f"DEBUG:urllib3: headers={{'Proxy-Authorization': 'Basic {p}', 'User-Agent': 'pip/24.0'}}")
p = b64(f"ml-ci:{pw(14)}".encode())
add("http-basic-auth", p, f"header: Authorization: Basic {p}")
p = jwt({"iss": "https://token.actions.githubusercontent.com", "sub": "repo:acme-ml/recipes:ref:refs/heads/main",
         "aud": "sts.amazonaws.com", "iat": 1717406062, "exp": 1717406362}, kid=hx(40))
add("jwt", p, f"GET https://auth.internal/callback#id_token={p}&state={hx(16)}")


# ==========================================================================
# further hard cases: SQL/Dockerfile/terraform echoes, odd URL hosts, blobs
# ==========================================================================
p = pw(14)
add("redis-monitor-auth", p, f'1717406062.123456 [0 10.0.4.17:51234] "AUTH" "{p}"')
p = pw(14, "!")
add("sql-create-user-password", p, f"CREATE ROLE ml_writer WITH LOGIN PASSWORD '{p}';")
p = pw(14)
add("sql-create-user-password", p, f"mysql> ALTER USER 'ml'@'%' IDENTIFIED BY '{p}';")
p = pw(16)
add("dockerfile-env-password", p, f"Step 7/12 : ENV DB_PASSWORD={p}")
p = pw(16)
add("dockerfile-env-password", p,
    f'#9 [5/9] RUN echo "machine nexus.internal login ml-ci password {p}" > /root/.netrc')
p = pw(16)
add("terraform-plan-password", p, f'      + password               = "{p}"')
p = r(32)
add("env-secret-one-word", p, f"SECRET={p}")
p = r(40, URLSAFE)
add("env-token-one-word", p, f"+ TOKEN={p}")
p = r(32, LALNUM)
add("env-api-key-one-word", p, f"API_KEY={p}")
p = pw(14)
add("py-auth-tuple", p,
    f"requests.get kwargs: {{'url': 'https://nexus.internal/service/rest/v1/status', 'auth': ('ml-ci', '{p}'), 'timeout': 10}}")
p = r(40, URLSAFE + "~.")
add("yaml-kebab-client-secret", p, f"    client-secret: {p}")
p = pw(14)
add("yaml-uppercase-password", p, f"  PASSWORD: {p}")
p = pw(14)
add("compose-env-list-password", p, f"      - POSTGRES_PASSWORD={p}")
p = pw(14)
add("adonet-password", p,
    f"ConnectionString: Server=tcp:sql.internal,1433;Database=labels;User Id=etl;Password={p};TrustServerCertificate=True")
p = pw(14)
add("url-userinfo-password", p,
    f"SNOWFLAKE_URL=snowflake://ml_loader:{p}@acme-xy12345/FEATURES/PUBLIC?warehouse=ML_WH")
p = pw(14)
add("url-userinfo-unix-socket", p,
    f"DATABASE_URL=postgresql://ml:{p}@/features?host=/cloudsql/acme-ml:us-central1:pg-main")
p = r(40)
add("url-userinfo-password", p, f"https://ci-bot:{p}@git.internal/ml/recipes.git")
p = r(24)
add("url-password-only-ipv6-host", p, f"REDIS_URL=redis://:{p}@[fd00:10:4::12]:6379/0")
p = r(48, URLSAFE)
add("url-query-access-token", p, f"websocket: connecting to wss://stream.internal/v1/metrics?token={p}")
p = pw(12)
add("url-query-password", p,
    f'INFO:     10.0.4.17:51234 - "GET /login?user=jdoe&password={p} HTTP/1.1" 200 OK')
p = pw(14)
add("cli-ansible-extra-vars-password", p,
    f"+ ansible-playbook -i hosts.ini site.yml -e ansible_password={p} --limit gpu_nodes")
p = b64(f"ml-ci:{pw(14)}".encode())
add("npmrc-auth-base64", p, f"_auth={p}")
p = b64(b"\x05\x02\x00\x00\x00" + rbytes(60) + b"ML.EXAMPLE.COM" + rbytes(80))
add("kerberos-keytab-base64", p, f"KRB5_KEYTAB_B64={p}")
p = b64(bytes.fromhex("30820a5a02010330820a2006092a864886f70d010701a0820a1104820a0d") + rbytes(600))
add("pkcs12-base64", p, f"CLIENT_P12_B64={p}")
p = b64(("-----BEGIN OPENSSH PRIVATE KEY-----\n" + "\n".join(chunks(der_body("openssh"), 70))
         + "\n-----END OPENSSH PRIVATE KEY-----\n").encode())
add("ssh-private-key-base64", p, f"+ echo {p}")
t = "1//0g" + r(98, URLSAFE)
add("gcp-oauth-refresh-token", t,
    f'token.json: {{"token": null, "refresh_token": "{t}", "token_uri": "https://oauth2.googleapis.com/token"}}')


# ==========================================================================
# ordinary lines: no secret, must be kept byte for byte
# ==========================================================================
def ed25519_pub():
    blob = (b"\x00\x00\x00\x0bssh-ed25519" + b"\x00\x00\x00\x20" + rbytes(32, orng))
    return "ssh-ed25519 " + b64(blob)


ORDINARY = [
    "# HF Trainer / transformers / tokenizers",
    "***** Running training *****",
    "  Num examples = 52,002",
    "  Total optimization steps = 4,875",
    "  Number of trainable parameters = 8,030,261,248",
    "{'loss': 1.4823, 'grad_norm': 0.9137, 'learning_rate': 1.998e-05, 'epoch': 0.02}",
    "{'train_runtime': 18234.5521, 'train_samples_per_second': 8.556, 'train_steps_per_second': 0.267, "
    "'train_loss': 1.1027, 'epoch': 3.0}",
    "Setting `pad_token_id` to `eos_token_id`:128001 for open-end generation.",
    "Special tokens have been added in the vocabulary, make sure the associated word embeddings are "
    "fine-tuned or trained.",
    "FutureWarning: The `use_auth_token` argument is deprecated and will be removed in v5 of "
    "Transformers. Please use `token` instead.",
    "LlamaTokenizerFast(name_or_path='meta-llama/Meta-Llama-3-8B', vocab_size=128000, "
    "model_max_length=8192, is_fast=True, padding_side='right', truncation_side='right', "
    "special_tokens={'bos_token': '<|begin_of_text|>', 'eos_token': '<|end_of_text|>', "
    "'pad_token': '<|end_of_text|>'}, clean_up_tokenization_spaces=True)",
    'GenerationConfig {"bos_token_id": 128000, "eos_token_id": [128001, 128009], '
    '"max_new_tokens": 512, "temperature": 0.6, "top_p": 0.9}',
    '  "pad_token_id": 0,',
    "  eos_token: </s>",
    "AutoModelForCausalLM.from_pretrained('mistralai/Mistral-7B-v0.1', token=None, "
    "trust_remote_code=True, torch_dtype=torch.bfloat16)",
    "Loading checkpoint shards: 100%|██████████| 4/4 [00:07<00:00,  1.83s/it]",
    "TrainingArguments(output_dir='/ckpt/llama3-sft/run-0042', per_device_train_batch_size=4, "
    "gradient_accumulation_steps=8, learning_rate=2e-05, hub_token=<HUB_TOKEN>, push_to_hub=False, "
    "report_to=['wandb'])",
    "Token indices sequence length is longer than the specified maximum sequence length for this "
    "model (9132 > 8192). Running this sequence through the model will result in indexing errors",
    "max_new_tokens=512, do_sample=True, temperature=0.7, top_k=50, num_return_sequences=1",
    "tokenizer.pad_token = tokenizer.eos_token  # pad_token_id=2",
    "Saving model checkpoint to /ckpt/llama3-sft/run-0042/checkpoint-1500",
    "loading file tokenizer.json from cache at /root/.cache/huggingface/hub/"
    f"models--meta-llama--Meta-Llama-3-8B/snapshots/{hx(40, orng)}/tokenizer.json",
    "The secret `HF_TOKEN` does not exist in your Colab secrets.",
    "Token is valid (permission: fineGrained).",
    "Your token has been saved to /root/.cache/huggingface/token",
    "Login successful.",
    f"huggingface_hub.errors.GatedRepoError: 401 Client Error. (Request ID: Root=1-665d8a2e-"
    f"{hx(24, orng)};{uuid4(orng)})",
    "Cannot access gated repo for url https://huggingface.co/meta-llama/Meta-Llama-3-8B/resolve/main/config.json.",
    "Map (num_proc=16): 100%|██████████| 52002/52002 [00:04<00:00, 11832.21 examples/s]",
    "  \"tokenizer_class\": \"LlamaTokenizer\",",
    "use_auth_token=None",
    "token=None",
    "trust_remote_code=True",
    "# Megatron-LM / DeepSpeed",
    " iteration     1200/  500000 | consumed samples:       307200 | elapsed time per iteration (ms): "
    "5123.4 | learning rate: 2.999E-04 | global batch size:   256 | lm loss: 2.451137E+00 | loss scale: "
    "1.0 | grad norm: 0.318 | number of skipped iterations:   0 | number of nan iterations:   0 |",
    " > number of parameters on (tensor, pipeline) model parallel rank (3, 1): 1750364160",
    "> building GPT2BPETokenizer tokenizer ...",
    " > padded vocab (size: 50257) with 175 dummy tokens (new size: 50432)",
    "  tokenizer_type .................................. GPT2BPETokenizer",
    "  tokenizer_model ................................. /data/tokenizers/llama3/tokenizer.model",
    "  seq_length ...................................... 4096",
    "  no_load_optim ................................... None",
    "[after dataloaders are built] datetime: 2024-06-03 09:14:22",
    "[2024-06-03 09:14:22,101] [INFO] [config.py:1000:print]   zero_optimization_stage ...... 3",
    "[2024-06-03 09:14:22,101] [INFO] [logging.py:96:log_dist] [Rank 0] step=100, skipped=0, "
    "lr=[2.9e-05], mom=[(0.9, 0.95)]",
    "[2024-06-03 09:14:22,101] [INFO] [config.py:1000:print]   checkpoint_tag_validation_enabled  True",
    "[2024-06-03 09:14:22,102] [INFO] [stage3.py:2097:step] [deepspeed] OVERFLOW! Rank 0 Skipping step. "
    "Attempted loss scale: 65536, reducing to 32768",
    "Using /root/.cache/torch_extensions/py310_cu121 as PyTorch extensions root...",
    "Saving checkpoint to /ckpt/llama3-70b/global_step12000/mp_rank_00_model_states.pt",
    "  loading checkpoint from /ckpt/llama3-70b at iteration 12000",
    "# vLLM / SGLang / serving",
    "INFO 06-03 09:14:22 metrics.py:341] Avg prompt throughput: 2781.4 tokens/s, Avg generation "
    "throughput: 1203.7 tokens/s, Running: 64 reqs, Swapped: 0 reqs, Pending: 3 reqs, GPU KV cache "
    "usage: 87.2%, CPU KV cache usage: 0.0%.",
    "INFO 06-03 09:14:22 api_server.py:212] vLLM API server version 0.5.0.post1",
    "INFO 06-03 09:14:22 api_server.py:213] args: Namespace(host='0.0.0.0', port=8000, "
    "uvicorn_log_level='info', allow_credentials=False, allowed_origins=['*'], allowed_methods=['*'], "
    "allowed_headers=['*'], api_key=None, lora_modules=None, chat_template=None, "
    "response_role='assistant', ssl_keyfile=None, ssl_certfile=None, ssl_ca_certs=None, "
    "ssl_cert_reqs=0, root_path=None, middleware=[], model='meta-llama/Meta-Llama-3-70B-Instruct', "
    "tokenizer=None, max_model_len=8192, tensor_parallel_size=8, gpu_memory_utilization=0.92)",
    "INFO 06-03 09:14:22 model_runner.py:146] Loading model weights took 16.1498 GB",
    "INFO 06-03 09:14:22 gpu_executor.py:83] # GPU blocks: 27797, # CPU blocks: 2048",
    'INFO:     10.0.4.17:51234 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
    f"INFO 06-03 09:14:22 async_llm_engine.py:564] Received request chat-{hx(32, orng)}: prompt: None, "
    "params: SamplingParams(n=1, best_of=1, presence_penalty=0.0, frequency_penalty=0.0, "
    "repetition_penalty=1.0, temperature=0.7, top_p=1.0, top_k=-1, min_p=0.0, seed=None, "
    "use_beam_search=False, length_penalty=1.0, early_stopping=False, stop=[], stop_token_ids=[], "
    "include_stop_str_in_output=False, ignore_eos=False, max_tokens=512, min_tokens=0, logprobs=None, "
    "prompt_logprobs=None, skip_special_tokens=True, spaces_between_special_tokens=True, "
    "truncate_prompt_tokens=None), prompt_token_ids: [128000, 128006, 9125, 128007, 271], "
    "lora_request: None.",
    "[2024-06-03 09:14:22 TP0] Decode batch. #running-req: 48, #token: 61234, token usage: 0.32, "
    "gen throughput (token/s): 3012.55, #queue-req: 0",
    "[2024-06-03 09:14:22 TP0] Prefill batch. #new-seq: 3, #new-token: 4096, #cached-token: 1234, "
    "cache hit rate: 23.15%, token usage: 0.30, #running-req: 45, #queue-req: 2",
    "server_args=ServerArgs(model_path='Qwen/Qwen2-72B-Instruct', tokenizer_path='Qwen/Qwen2-72B-Instruct', "
    "tokenizer_mode='auto', skip_tokenizer_init=False, load_format='auto', dtype='auto', "
    "trust_remote_code=True, host='0.0.0.0', port=30000, tp_size=8, api_key=None, random_seed=42)",
    "[2024-06-03 09:14:22] The server is fired up and ready to roll!",
    "INFO:     Uvicorn running on http://0.0.0.0:8000 (Press CTRL+C to quit)",
    "INFO:     Application startup complete.",
    "max_tokens: 4096",
    "num_tokens: 2048",
    "throughput: 41872.3 tokens/s (per GPU: 654.3 tokens/s)",
    "Tokens: 1,204,912 / 2,000,000,000 (0.06%)",
    "# NCCL / torch.distributed / CUDA",
    "gpu-node-07:2841:2841 [0] NCCL INFO Bootstrap : Using eth0:10.0.4.17<0>",
    "gpu-node-07:2841:3002 [0] NCCL INFO comm 0x55d5c8e0a1b0 rank 0 nranks 64 cudaDev 0 nvmlDev 0 "
    "busId 18000 commId 0x9d5b8e3a1f2c4d67 - Init COMPLETE",
    "gpu-node-07:2841:3002 [0] NCCL INFO Channel 00/32 :    0   1   2   3   4   5   6   7",
    "gpu-node-07:2841:3002 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [2]mlx5_2:1/IB "
    "[3]mlx5_3:1/IB ; OOB eth0:10.0.4.17<0>",
    "NCCL version 2.21.5+cuda12.4",
    "gpu-node-07:2841:3010 [0] NCCL INFO [Service thread] Connection closed by localRank 3",
    "[rank12]:[E603 09:14:22.101] [PG 0 (default_pg) Rank 12] Watchdog caught collective operation "
    "timeout: WorkNCCL(SeqNum=48211, OpType=ALLREDUCE, NumelIn=262144000, NumelOut=262144000, "
    "Timeout(ms)=600000) ran for 600041 milliseconds before timing out.",
    "[W socket.cpp:464] [c10d] The server socket has failed to bind to [::]:29500 (errno: 98 - Address "
    "already in use).",
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
    "INFO:torch.distributed.launcher.api:Starting elastic_operator with launch configs: entrypoint: "
    "train.py, min_nodes: 8, max_nodes: 8, nproc_per_node: 8, run_id: llama3-70b-sft, rdzv_backend: "
    "c10d, rdzv_endpoint: gpu-node-01:29400, rdzv_configs: {'timeout': 900}, max_restarts: 0, "
    "monitor_interval: 5, log_dir: None, metrics_cfg: {}",
    "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
    "capacity of 79.14 GiB of which 1.23 GiB is free. Including non-PyTorch memory, this process has "
    "77.89 GiB memory in use.",
    "RuntimeError: CUDA error: an illegal memory access was encountered",
    "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace "
    "below might be incorrect.",
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
    "NVRM: Xid (PCI:0000:18:00): 79, pid=2841, GPU has fallen off the bus.",
    f"GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-{uuid4(orng)})",
    "| NVIDIA-SMI 550.54.15              Driver Version: 550.54.15      CUDA Version: 12.4     |",
    "Connecting to [fe80::1ff:fe23:4567:890a%eth0]:29500",
    '2001:db8:85a3::8a2e:370:7334 - - [03/Jun/2024:09:14:22 +0000] "GET /health HTTP/1.1" 200 2',
    "# Slurm",
    "srun: job 4815162 queued and waiting for resources",
    "srun: job 4815162 has been allocated resources",
    "slurmstepd: error: *** JOB 4815162 ON gpu-node-07 CANCELLED AT 2024-06-03T09:14:22 DUE TO TIME LIMIT ***",
    "SLURM_JOB_NODELIST=gpu-node-[01-08]",
    "srun: error: gpu-node-03: task 17: Exited with exit code 1",
    "SLURM_STEP_GPUS=0,1,2,3,4,5,6,7",
    "# pip / conda",
    "Looking in indexes: https://pypi.org/simple, https://download.pytorch.org/whl/cu121",
    "Successfully installed accelerate-0.30.1 flash-attn-2.5.8 tokenizers-0.19.1 transformers-4.41.2",
    "Collecting flash-attn==2.5.8",
    "  Downloading flash_attn-2.5.8.tar.gz (2.5 MB)",
    "Requirement already satisfied: sentencepiece in /opt/conda/lib/python3.10/site-packages (0.2.0)",
    "WARNING: Running pip as the 'root' user can result in broken permissions and conflicting behaviour "
    "with the system package manager.",
    "  Created wheel for flash-attn: filename=flash_attn-2.5.8-cp310-cp310-linux_x86_64.whl "
    f"size=120616719 sha256={hx(64, orng)}",
    "CondaHTTPError: HTTP 401 UNAUTHORIZED for url <https://conda.anaconda.org/t/<TOKEN>/acme-ml/"
    "linux-64/repodata.json>",
    "# git / ssh",
    "HEAD is now at 3f2a9c1 fix tokenizer padding side for batched generation",
    f"commit {hx(40, orng)}",
    "Cloning into 'Megatron-LM'...",
    "git@github.com: Permission denied (publickey).",
    "+ git clone ssh://git@github.com/acme-ml/recipes.git /workspace/recipes",
    f"Submodule path 'third_party/cutlass': checked out '{hx(40, orng)}'",
    "remote: Enumerating objects: 1523, done.",
    "   1a2b3c4..5d6e7f8  main       -> origin/main",
    "git@github.com:acme-ml/recipes.git",
    "Author: Jane Doe <jane.doe@example.com>",
    "ssh -p 2222 ubuntu@gpu-node-07.internal 'nvidia-smi -L'",
    "scp -P 2222 ckpt.tar ubuntu@10.0.4.17:/data/",
    f"{ed25519_pub()} ml-bot@gpu-node-01",
    f"The key fingerprint is SHA256:{b64(rbytes(32, orng)).rstrip('=')} ml-bot@gpu-node-01",
    "Your identification has been saved in /root/.ssh/id_ed25519",
    "Your public key has been saved in /root/.ssh/id_ed25519.pub",
    "-----BEGIN CERTIFICATE-----",
    "-----BEGIN PUBLIC KEY-----",
    f"    certificate-authority-data: {b64(('-----BEGIN CERTIFICATE-----' + chr(10) + b64(rbytes(180, orng))).encode())}",
    f"    client-certificate-data: {b64(('-----BEGIN CERTIFICATE-----' + chr(10) + b64(rbytes(180, orng))).encode())}",
    "# docker",
    f"Digest: sha256:{hx(64, orng)}",
    "Status: Downloaded newer image for nvcr.io/nvidia/pytorch:24.05-py3",
    "+ docker run --rm --gpus all --ipc=host -p 8080:80 -v /data:/data "
    "ghcr.io/huggingface/text-generation-inference:2.0.4 --model-id meta-llama/Meta-Llama-3-8B-Instruct",
    "WARNING! Using --password via the CLI is insecure. Use --password-stdin.",
    "Login Succeeded",
    "24.05-py3: Pulling from nvidia/pytorch",
    f"{hx(12, orng)}: Pull complete",
    "# secret-sounding keys whose values are not secrets",
    "secret_name: hf-secret",
    "  secretName: wandb-api-key",
    "ssl_keyfile=/etc/ssl/private/server-key.pem",
    "+ python manage_db.py --password-file /run/secrets/db_password --host pg.internal",
    "--token-file /var/run/secrets/kubernetes.io/serviceaccount/token",
    "credentials_file: /var/run/secrets/gcp/key.json",
    "GOOGLE_APPLICATION_CREDENTIALS=/var/run/secrets/gcp/sa.json",
    "  key: loss",
    "password_required: false",
    "  token_type: bearer",
    "auth: none",
    "api_key=None",
    "  api_key: ${OPENAI_API_KEY}",
    "DB_PASSWORD=${DB_PASSWORD:?must be set}",
    "password=***",
    "password: null",
    "PASSWORD_MIN_LENGTH=12",
    "Error: passwords do not match",
    "token_budget=4096 max_prompt_tokens=3584",
    "  api_version: 2024-02-01",
    "key_len=32 cipher=aes-256-gcm",
    "  tls_secret_name: vllm-tls",
    "  password: <redacted>",
    '  password: "{{ .Values.db.password }}"',
    "+ export AWS_SECRET_ACCESS_KEY=",
    "      HF_TOKEN:  <set to the key 'token' in secret 'hf-secret'>  Optional: false",
    '  "secret_key_ref": {"name": "db-creds", "key": "password"}',
    "KeyError: 'OPENAI_API_KEY'",
    "openai.AuthenticationError: Error code: 401 - {'error': {'message': 'Incorrect API key provided: "
    "sk-proj-********************abcd. You can find your API key at "
    "https://platform.openai.com/account/api-keys.', 'type': 'invalid_request_error', 'param': None, "
    "'code': 'invalid_api_key'}}",
    "  - Token: gho_************************************",
    "    sasl.jaas.config = [hidden]",
    "    ssl.key.password = null",
    "Connected to amqp://guest:**@rabbitmq.internal:5672//",
    "engine: Engine(postgresql+psycopg2://etl:***@pg.internal:5432/features)",
    "2024-06-03 09:14:22,101 - MainThread - botocore.credentials - INFO - Found credentials in "
    "environment variables.",
    "Authorization header is missing or malformed; expected 'Bearer <token>'",
    f"traceparent: 00-{hx(32, orng)}-{hx(16, orng)}-01",
    f'etag: "{hx(40, orng)}"',
    "# wandb",
    "wandb: Appending key for api.wandb.ai to your netrc file: /root/.netrc",
    "wandb: W&B API key is configured. Use `wandb login --relogin` to force relogin",
    "wandb: Currently logged in as: mlteam (acme-ml). Use `wandb login --relogin` to force relogin",
    "wandb: 🚀 View run at https://wandb.ai/acme-ml/llama3-sft/runs/ab12cd34",
    "wandb: Run data is saved locally in /workspace/wandb/run-20240603_091422-ab12cd34",
    "wandb: Syncing run dulcet-sky-42",
    "# shell traces, ports, paths, ids",
    "+ mkdir -p /tmp/ckpt/run-0042",
    "psql -h pg.internal -p 5432 -U app -d features -c 'select 1'",
    "mysql -h mysql.internal -P 3306 -u app -p",
    "Enter password:",
    "redis-cli -h redis.internal -p 6379 ping",
    "export HF_HUB_ENABLE_HF_TRANSFER=1",
    "export TOKENIZERS_PARALLELISM=false",
    "export NCCL_IB_HCA=mlx5_0,mlx5_1,mlx5_2,mlx5_3",
    "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
    "+ export WANDB_PROJECT=llama3-sft",
    "+ export MASTER_ADDR=gpu-node-01 MASTER_PORT=29500",
    f"run_id={uuid4(orng)}",
    f"sha256sum: {hx(64, orng)}  model-00001-of-00030.safetensors",
    f"md5: {hx(32, orng)}  tokenizer.model",
    "Received 11 bytes: aGVsbG8gd29ybGQ=",
    "payload (base64): eyJzdGVwIjogMTAwfQ==",
    "Loaded checkpoint '/ckpt/llama3-70b/iter_0012000' (iteration 12000)",
    "2024-06-03T09:14:22.101Z INFO heartbeat ok node=gpu-node-07 gpus=8",
    "[I 2024-06-03 09:14:22.101 ServerApp] Jupyter Server 2.14.0 is running at:",
    "View the Ray dashboard at http://127.0.0.1:8265",
    "Local node IP: 10.0.4.17",
    "# tracebacks and progress",
    "Traceback (most recent call last):",
    '  File "/workspace/train.py", line 214, in <module>',
    "    main(args)",
    '  File "/opt/conda/lib/python3.10/site-packages/torch/nn/modules/module.py", line 1532, in '
    "_wrapped_call_impl",
    "ValueError: Tokenizer class LlamaTokenizer does not exist or is not currently imported.",
    " 45%|████▌     | 450/1000 [02:13<02:43,  3.37it/s]",
    "Epoch 2/3:  61%|██████    | 2977/4875 [1:42:10<1:05:09,  2.06s/it, loss=1.21, lr=1.4e-05]",
]


# --------------------------------------------------------------------------
def check():
    errors = []
    seen_lines = set()
    for rule, secret, line in ROWS:
        if rule not in RULES:
            errors.append(f"unknown rule {rule}")
        for field in (rule, secret, line):
            if "\t" in field or "\n" in field or "\r" in field:
                errors.append(f"{rule}: tab/newline in a field")
        if not secret:
            errors.append(f"{rule}: empty secret")
        if line.count(secret) != 1 or line.find(secret, line.find(secret) + 1) != -1:
            errors.append(f"{rule}: secret not exactly once in line: {line[:80]}")
        if line in seen_lines:
            errors.append(f"{rule}: duplicate line")
        seen_lines.add(line)
        if rule.startswith("#"):
            errors.append(f"{rule}: rule looks like a comment")
    ord_lines = [ln for ln in ORDINARY if not ln.startswith("#")]
    if len(set(ord_lines)) != len(ord_lines):
        errors.append("duplicate ordinary line")
    for ln in ORDINARY:
        if "\t" in ln or "\n" in ln or "\r" in ln or ln != ln.rstrip():
            errors.append(f"bad ordinary line: {ln[:60]}")
        for _, secret, _ in ROWS:
            if len(secret) >= 8 and secret in ln:
                errors.append(f"ordinary line contains a corpus secret: {ln[:60]}")
    if len(ROWS) < 170 or len(ord_lines) < 120:
        errors.append(f"too few rows: {len(ROWS)} secrets, {len(ord_lines)} ordinary")
    return errors


def main():
    errors = check()
    if errors:
        for e in errors:
            print("error:", e, file=sys.stderr)
        return 1
    here = os.path.dirname(os.path.abspath(__file__))
    fams = ["token", "kv", "url", "cli", "blob"]
    with open(os.path.join(here, "secrets.tsv"), "w", encoding="utf-8", newline="\n") as f:
        f.write("# Redaction corpus: rule<TAB>secret<TAB>line. Generated by make_corpus.py "
                f"(seed {SEED}); every secret is fake.\n")
        f.write("# secret occurs exactly once, verbatim, in line; lines starting with # are comments.\n")
        for fam in fams:
            rows = [row for row in ROWS if RULES[row[0]][0] == fam]
            f.write(f"# --- family {fam}: {len(rows)} rows ---\n")
            for row in rows:
                f.write("\t".join(row) + "\n")
    with open(os.path.join(here, "ordinary.txt"), "w", encoding="utf-8", newline="\n") as f:
        f.write("# Ordinary job-log lines with no secret: a redactor must keep each byte for byte.\n")
        f.write(f"# Generated by make_corpus.py (seed {SEED}); lines starting with # are comments.\n")
        for ln in ORDINARY:
            f.write(ln + "\n")
    counts = {fam: sum(1 for row in ROWS if RULES[row[0]][0] == fam) for fam in fams}
    print(f"secrets.tsv: {len(ROWS)} rows, {len({r_[0] for r_ in ROWS})} rules; "
          + ", ".join(f"{k}={v}" for k, v in counts.items()))
    print(f"ordinary.txt: {sum(1 for ln in ORDINARY if not ln.startswith('#'))} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
