#include "collect/joblog/text/redact.h"

#include <gtest/gtest.h>

#include <string>

namespace ithbat::collect::joblog {
namespace {

struct Case {
  std::string in;
  std::string want;
  size_t secrets;
};

std::string Redacted(std::string s) {
  RedactSecrets(s);
  return s;
}

// Fake credentials in the real formats (none of these is a live key).
const Case kSecrets[] = {
    {"curl -H 'Authorization: Bearer abcDEF123456789xyz' https://x", "curl -H 'Authorization: Bearer [REDACTED]' https://x", 1},
    {"Authorization: Basic dXNlcjpwYXNzd29yZA==", "Authorization: Basic [REDACTED]", 1},
    {"headers={'authorization': 'token ghx0123456789abcdef'}", "headers={'authorization': 'token [REDACTED]'}", 1},
    {"sending bearer eyJhbGciOiJIUzI1NiJ9abc to server", "sending bearer [REDACTED] to server", 1},
    {"password=hunter2 user=bob", "password=[REDACTED] user=bob", 1},
    {"DB_PASSWORD: s3cr3t!", "DB_PASSWORD: [REDACTED]", 1},
    {"config {\"api_key\": \"abc123\", \"lr\": 0.1}", "config {\"api_key\": \"[REDACTED]\", \"lr\": 0.1}", 1},
    {"{'wandb_api_key': 'a1b2c3 d4'}", "{'wandb_api_key': '[REDACTED]'}", 1},
    {"log: {\\\"client_secret\\\": \\\"zzz\\\"}", "log: {\\\"client_secret\\\": \\\"[REDACTED]\\\"}", 1},
    {"accessToken=abc.def&next=1", "accessToken=[REDACTED]&next=1", 1},
    {"x-api-key: 12345", "x-api-key: [REDACTED]", 1},
    {"credentials={'user': 'a', 'pw': 'b'} done", "credentials=[REDACTED] done", 1},
    {"train.py --hf_token abcdefgh --lr 1e-4", "train.py --hf_token [REDACTED] --lr 1e-4", 1},
    {"run --password=xyz", "run --password=[REDACTED]", 1},
    {"db = postgres://admin:pa55word@db.local:5432/x", "db = postgres://admin:[REDACTED]@db.local:5432/x", 1},
    {"key AKIAIOSFODNN7EXAMPLE used", "key [REDACTED] used", 1},
    {"aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "aws_secret_access_key = [REDACTED]", 1},
    {"token ghp_0123456789abcdefghijABCDEFGHIJklmnop ok", "token [REDACTED] ok", 1},
    {"github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuv", "[REDACTED]", 1},
    {"HF_TOKEN=hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345", "HF_TOKEN=[REDACTED]", 1},
    {"using hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345 for download", "using [REDACTED] for download", 1},
    {"OPENAI key sk-proj-Ab12Cd34Ef56Gh78Ij90KlMn", "OPENAI key [REDACTED]", 1},
    {"anthropic sk-ant-api03-AbCd1234EfGh5678IjKl", "anthropic [REDACTED]", 1},
    {"slack xoxb-123456789012-abcdefABCDEF", "slack [REDACTED]", 1},
    {"maps AIzaSyA1234567890abcdefghijklmnopqrstu", "maps [REDACTED]", 1},
    {"jwt=eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U end",
     "jwt=[REDACTED] end", 1},
    {"cookie eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmN",
     "cookie [REDACTED]", 1},
    {"\"key\": \"-----BEGIN RSA PRIVATE KEY-----\\nMIIEpAIBAAKCAQEA\\n-----END RSA PRIVATE KEY-----\"",
     "\"key\": \"-----BEGIN RSA PRIVATE KEY-----[REDACTED]-----END RSA PRIVATE KEY-----\"", 1},
    {"MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj", "[REDACTED]", 1},
    {"password=a secret=b", "password=[REDACTED] secret=[REDACTED]", 2},
    // A key that touches a secret starts after it, as it will in the output (found by fuzzing:
    // the key once reached back into the JWT and was too long the first time, not the second).
    {"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.abc.xAuthorization: zzz",
     "[REDACTED].xAuthorization: [REDACTED]", 2},
};

TEST(RedactTest, EachSecretKind) {
  for (const Case& c : kSecrets) {
    std::string line = c.in;
    EXPECT_EQ(RedactSecrets(line), c.secrets) << c.in;
    EXPECT_EQ(line, c.want) << c.in;
  }
}

TEST(RedactTest, IsIdempotent) {
  for (const Case& c : kSecrets) {
    std::string once = Redacted(c.in);
    std::string twice = once;
    EXPECT_EQ(RedactSecrets(twice), 0u) << once;
    EXPECT_EQ(twice, once);
  }
}

// Found by line_assembler_fuzz: "u:p@[31m…" is no userinfo (the bracket holds no IPv6 address and
// never closes); once the Hugging Face token after it became "[REDACTED]", that marker's ']'
// closed the bracket and a second pass hid "p". Only an IPv6 literal is a bracketed host.
TEST(RedactTest, AMarkerNeverMakesAHostOfWhatWasNone) {
  for (const char* in : {" h$ttps://u:p@[31mgreen0C0EfGhIjK\xff\xffhf_AbCdEfGhIjKlMnOpQrStUvn",
                         "redis://u:p@[not-an-address sk-proj-AbCdEfGhIjKlMnOpQrStUvWxYz012345"}) {
    std::string once = in;
    RedactSecrets(once);
    std::string twice = once;
    EXPECT_EQ(RedactSecrets(twice), 0u) << once;
    EXPECT_EQ(twice, once);
  }
  // An IPv6 host, with or without a zone, is one.
  for (const char* in : {"postgres://app:s3cretPw9@[::1]:5432/db", "http://app:s3cretPw9@[fe80::1%eth0]/x"}) {
    std::string line = in;
    EXPECT_EQ(RedactSecrets(line), 1u) << in;
    EXPECT_EQ(line.find("s3cretPw9"), std::string::npos) << line;
  }
}

// Found by redact_fuzz: "Authorization: <word> -----BEGIN …" and "Bearer -----BEGIN …" took the
// PEM header's first word for the credential, and the block itself was never looked at again.
TEST(RedactTest, APrivateKeyAfterAnAuthorizationSchemeWordIsHiddenWhole) {
  for (const char* in :
       {"Authorization: abc -----BEGIN RSA PRIVATE KEY-----MIIEpAIBAAKCAQEAx7Zk2Lm9Np4Qr8St3Uv"
        "-----END RSA PRIVATE KEY----- ",
        "[rank0]: Authorization: Be: Authorization:a0r -----BEGIN RSA PRIVATE KEY-----"
        "MIIEpAIBAAKCAQEAx7Zk2Lm9Np4Qr8St3Uv-----END RSA PRIVATE KEY-----",
        "x: Bearer   -----BEGIN RSA PRIVATE KEY-----MIIEpAIBAAKCAQEAx7Zk2Lm9Np4Qr8St3Uv"
        "-----END RSA PRIVATE KEY----- "}) {
    std::string line = in;
    RedactSecrets(line);
    EXPECT_EQ(line.find("MIIEpAIBAAKCAQEA"), std::string::npos) << line;
    std::string twice = line;
    EXPECT_EQ(RedactSecrets(twice), 0u) << line;
  }
}

// Found by line_assembler_fuzz: a path value ("sig:/hf_…") is no secret, the token in it is; the
// second pass saw "/[REDACTED" and took it for a secret. A marker that is a whole component keeps
// a path a path.
TEST(RedactTest, APathWithARedactedComponentStaysAPath) {
  std::string line = " 234tpskwIn0.sig:/hf_AbCdEfGhIj1lMnOQpz012345";
  EXPECT_EQ(RedactSecrets(line), 1u);
  EXPECT_EQ(line, " 234tpskwIn0.sig:/[REDACTED]");
  std::string twice = line;
  EXPECT_EQ(RedactSecrets(twice), 0u);
  EXPECT_EQ(twice, line);
  // Part of a component, as a JWT after dashes becomes.
  line = "x.sig:/---------eyJhbGciOiJIUzI1NiJ9.eyJzdWIiO0NTY3ODkwIn0.sig";
  EXPECT_EQ(RedactSecrets(line), 1u);
  EXPECT_EQ(line, "x.sig:/---------[REDACTED]");
  twice = line;
  EXPECT_EQ(RedactSecrets(twice), 0u);
}

// Found by redact_fuzz: "${OPEer\"…" is no ${VAR} expansion; read as one, its decision rested on
// a '}' that a later secret's redaction took away, and the second pass redacted it.
TEST(RedactTest, AnExpansionIsANameThenACloseOrAnOperator) {
  std::string line = "{\"api_key\":${OPEer\"api\x05{\"api_key\":{{ [REI_KPY}\", #\t password=Tr0ub4dor&3x ";
  RedactSecrets(line);
  EXPECT_EQ(line.find("Tr0ub4dor"), std::string::npos) << line;
  std::string twice = line;
  EXPECT_EQ(RedactSecrets(twice), 0u) << line;
  EXPECT_EQ(twice, line);
  // Expansions stay placeholders.
  for (const char* keep : {"password=${DB_PASSWORD}", "password=${DB_PASSWORD:?must be set}"}) {
    std::string l = keep;
    EXPECT_EQ(RedactSecrets(l), 0u) << keep;
  }
}

// Found by redact_fuzz: curl -u "USER:PASSWORD" hid the password and skipped the user part, so a
// token inside a quoted "user" leaked.
TEST(RedactTest, ASecretInAToolsUserPartIsNotSkipped) {
  std::string line = "curl -u \"ab/_A@n HF_TOKEN=hf_Q7xKp2LmN9vR4tY8wZ3aB6cD1eF5gH0j wH:phm '\": ";
  RedactSecrets(line);
  EXPECT_EQ(line.find("hf_Q7xKp2"), std::string::npos) << line;
  std::string twice = line;
  EXPECT_EQ(RedactSecrets(twice), 0u) << line;
  // A plain user stays.
  std::string plain = "curl -u alice:s3cretPw9 https://example.com";
  RedactSecrets(plain);
  EXPECT_NE(plain.find("alice:"), std::string::npos) << plain;
  EXPECT_EQ(plain.find("s3cretPw9"), std::string::npos) << plain;
}

// Found by redact_fuzz: a flag whose value is the next key ("--hf-token api_key: x") took the key
// for its value, and the key's value leaked.
TEST(RedactTest, AFlagFollowedByAKeyLeavesTheKeyItsValue) {
  for (const char* in : {"--hf-token 'api_key': 'k3yV4lu3S3cr3t99' ", "--hf-token api_key: k3yV4lu3S3cr3t99",
                         "--hf-token  'api_key': 'k3yV4lu3S3cr3t99' "}) {
    std::string line = in;
    RedactSecrets(line);
    EXPECT_EQ(line.find("k3yV4lu3"), std::string::npos) << line;
  }
}

// Found by the fuzzers from their seeds in 10 s: a host that ran into a JWT ended at its marker
// the second time (and became a host); a quoted value opening with a literal marker skipped
// everything up to its closing quote, a key inside it included.
TEST(RedactTest, MarkersReadAsWhatTheyReplaced) {
  std::string line =
      "https://u:p@'/x "
      "BeareciOiJI://u:p@UN1IpiJ9.eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.sigAuthorization: "
      "reeaBr abcDEF246913578xyz";
  RedactSecrets(line);
  std::string twice = line;
  EXPECT_EQ(RedactSecrets(twice), 0u) << line;
  EXPECT_EQ(twice, line);
  std::string quoted = "--password '[REDACTED]ne S3n:  d AKIAQ3EGRT7HJ5KLMN2P ";
  RedactSecrets(quoted);
  EXPECT_EQ(quoted.find("AKIAQ3EG"), std::string::npos) << quoted;
}

// Lines that look like secrets to a careless rule and must be kept as they are.
TEST(RedactTest, LookAlikesAreKept) {
  const std::string kKeep[] = {
      "{'loss': 2.3456, 'grad_norm': 1.25, 'learning_rate': 5e-05, 'epoch': 0.1}",
      "tokens_per_second: 12345.6 max_tokens=2048 num_tokens: 99",
      "token_usage: 0.52, #token: 12345, tokenizer: gpt2",
      "special_tokens={'eos_token': '</s>', 'pad_token': '<pad>', 'bos_token': '<s>'}",
      "pwd: /home/user/run pass: 3 of 5",
      "key: loss value: 2.5",
      "Using basic tokenizer, bearer of news",
      "hf_trainer hf_hub_download(repo_id='gpt2') hf_transformers_internals",
      "sk-learn version 1.4 task-sk-abcdefghijklmnopqrstuvwxyz",
      "sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
      "AKIA is a prefix; AKIAIOSFODNN7EXAMPLEX is too long",
      "https://huggingface.co/models?search=llama user@example.com",
      "iteration      100/  500000 | consumed samples:        51200 | lm loss: 7.123456E+00 |",
      "[rank0]:[E ProcessGroupNCCL.cpp:563] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=4, OpType=ALLREDUCE)",
      "Secret sharing disabled; password reset not needed",
      "-----BEGIN CERTIFICATE-----MIIBkTCB+wIJAK-----END CERTIFICATE-----",
      "",
  };
  for (const std::string& line : kKeep) {
    std::string copy = line;
    EXPECT_EQ(RedactSecrets(copy), 0u) << line;
    EXPECT_EQ(copy, line);
  }
}

TEST(RedactTest, AlreadyRedactedValueIsLeftAlone) {
  std::string line = "password=[REDACTED] token: '[REDACTED]' Bearer [REDACTED]";
  EXPECT_EQ(RedactSecrets(line), 0u);
  EXPECT_EQ(line, "password=[REDACTED] token: '[REDACTED]' Bearer [REDACTED]");
}

TEST(RedactTest, UnclosedQuoteRedactsToTheEndOfTheLine) {
  EXPECT_EQ(Redacted("api_key='abc def"), "api_key='[REDACTED]");
}

TEST(RedactTest, LongLineWithManySecrets) {
  std::string line, want;
  for (int k = 0; k < 2000; ++k) {
    line += "api_key: x" + std::to_string(k) + ", ";
    want += "api_key: [REDACTED], ";
  }
  EXPECT_EQ(RedactSecrets(line), 2000u);
  EXPECT_TRUE(line == want);
}

TEST(RedactTest, ArgvListsAsPythonPrintsThem) {
  EXPECT_EQ(Redacted("Command '['python', 'train.py', '--password', 'hunter2', '--lr', '1e-4']' returned 1"),
            "Command '['python', 'train.py', '--password', '[REDACTED]', '--lr', '1e-4']' returned 1");
  EXPECT_EQ(Redacted("args: [\"--wandb_api_key\", \"0123456789abcdef\"]"),
            "args: [\"--wandb_api_key\", \"[REDACTED]\"]");
  // A secret flag followed by another flag had no value.
  EXPECT_EQ(Redacted("['--token', '--lr', '1e-4']"), "['--token', '--lr', '1e-4']");
}

TEST(RedactTest, KeysLongerThanTheWindowAreDecidedByTheirLastWords) {
  EXPECT_EQ(Redacted("model.data.train_ds.storage_options.client_kwargs.aws_secret_access_key=wJalrXUtnFEMI/K7MDENG"),
            "model.data.train_ds.storage_options.client_kwargs.aws_secret_access_key=[REDACTED]");
  EXPECT_EQ(Redacted("model.data.train_ds.storage_options.client_kwargs.some_long_group.max_tokens=4096"),
            "model.data.train_ds.storage_options.client_kwargs.some_long_group.max_tokens=4096");
}

TEST(RedactTest, SignaturesOfPresignedUrls) {
  EXPECT_EQ(Redacted("GET https://acct.blob.core.windows.net/c/x?sv=2022&sig=AbCdEf123%3D&se=1"),
            "GET https://acct.blob.core.windows.net/c/x?sv=2022&sig=[REDACTED]&se=1");
  EXPECT_EQ(Redacted("url ...&X-Amz-Signature=0123456789abcdef0123 done"), "url ...&X-Amz-Signature=[REDACTED] done");
}

TEST(RedactTest, ManyJwtStartsInOneRunAreScannedOnce) {
  // "-eyJ" repeated: every occurrence is a word start; the result must still be correct (and
  // the scan linear, which the fuzzer's timeout would catch; no timing here).
  std::string line;
  for (int i = 0; i < 4000; ++i) line += "-eyJ";
  std::string copy = line;
  EXPECT_EQ(RedactSecrets(copy), 0u);
  EXPECT_EQ(copy, line);
  std::string jwt = line + " eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N";
  EXPECT_EQ(RedactSecrets(jwt), 1u);
  EXPECT_EQ(jwt, line + " [REDACTED]");
}

TEST(RedactTest, ExcerptsAreRedactedBeforeTheyAreCut) {
  // A URL password across the cut: cut first, "pa$$" would be kept (no '@' left to see).
  const std::string line = "connect failed: postgres://admin:pa$$w0rd!@db.internal:5432/train";
  const size_t in_password = line.find("pa$$") + 4;
  EXPECT_EQ(RedactedExcerpt(line, in_password), "connect failed: postgres://admin:") << "cut before the marker";
  EXPECT_EQ(RedactedExcerpt(line, 1000), "connect failed: postgres://admin:[REDACTED]@db.internal:5432/train");
  // Never inside a marker, never inside a UTF-8 sequence.
  const std::string redacted = "password=[REDACTED] rest";
  EXPECT_EQ(RedactedExcerpt("password=hunter2 rest", 12), "password=");
  EXPECT_EQ(RedactedExcerpt("password=hunter2 rest", redacted.size()), redacted);
  EXPECT_EQ(RedactedExcerpt("loss \xc3\xa9t\xc3\xa9", 6), "loss ");
}

TEST(RedactTest, ACutLineLosesItsUnfinishedLastWord) {
  EXPECT_EQ(OpenTailStart("error at postgres://admin:pa"), std::string("error at ").size());
  EXPECT_EQ(OpenTailStart("ends with a space "), std::string("ends with a space ").size());
  EXPECT_EQ(OpenTailStart(""), 0u);
  // One word longer than kMaxOpenWordBytes: cut after its last delimiter in the window.
  std::string json = "{";
  while (json.size() < 3 * kMaxOpenWordBytes) json += "\"k\":1,";
  json += "\"url\":\"https://u:pa";
  EXPECT_EQ(OpenTailStart(json), json.rfind('"') + 1) << "after the quote that opens the URL";
  // No delimiter at all: at most kMaxOpenWordBytes are lost.
  const std::string blob(3 * kMaxOpenWordBytes, 'a');
  EXPECT_EQ(OpenTailStart(blob), blob.size() - kMaxOpenWordBytes);
}

TEST(RedactTest, KeysThatAreOneWord) {
  EXPECT_EQ(Redacted("PGPASSWORD=pg-s3cret psql -h db"), "PGPASSWORD=[REDACTED] psql -h db");
  EXPECT_EQ(Redacted("export REDISCLI_AUTH=r3dis!"), "export REDISCLI_AUTH=[REDACTED]");
  EXPECT_EQ(Redacted("CLIENTSECRET: abcd1234"), "CLIENTSECRET: [REDACTED]");
  EXPECT_EQ(Redacted("SECRET_KEY_BASE=9f8e7d6c5b4a"), "SECRET_KEY_BASE=[REDACTED]");
  EXPECT_EQ(Redacted("Server=db;Database=x;Uid=sa;Pwd=Sql!Pass;"), "Server=db;Database=x;Uid=sa;Pwd=[REDACTED];");
  EXPECT_EQ(Redacted("PWD=/home/alice/run OLDPWD=/home/alice"), "PWD=/home/alice/run OLDPWD=/home/alice");
  EXPECT_EQ(Redacted("Cookie: theme=dark; sessionid=abc123xyz"), "Cookie: [REDACTED]");
  EXPECT_EQ(Redacted("docker config {\"auths\": {\"r.io\": {\"auth\": \"YWxpY2U6czNjcjN0cGFzcw==\"}}}"),
            "docker config {\"auths\": {\"r.io\": {\"auth\": \"[REDACTED]\"}}}");
}

TEST(RedactTest, ValuesThatCannotBeSecretsAreKept) {
  const std::string kKeep[] = {
      "use_auth_token=None token=None api_key: null",
      "password_required: false, auth: none, auth: true",
      "api_key: ${OPENAI_API_KEY} password: <redacted> secret: ***",
      "HF_TOKEN=$HF_TOKEN_FROM_VAULT DB_PASSWORD=${DB_PASSWORD:?must be set}",
      "ssl_key=/etc/ssl/private/server.key client_secret: ./secrets/client.json",
      "docker run -u 1000:1000 --user 1000:1000 img",
  };
  for (const std::string& line : kKeep) EXPECT_EQ(Redacted(line), line);
}

TEST(RedactTest, APemHeaderIsAHeader) {
  // Found by redact_fuzz: a malformed header reached over a token to the next "-----".
  EXPECT_EQ(Redacted("-----BEGIN PRIVATE KEY----% AKIAQ3EGRT7HJ5KLMN2P x-----"),
            "-----BEGIN PRIVATE KEY----% [REDACTED] x-----");
}

TEST(RedactTest, AnEmptyValueDoesNotSwallowTheNextKey) {
  // Found by redact_fuzz: the flag after "password= " was taken as its value.
  EXPECT_EQ(Redacted("password= --hf-token Zq8Wm3Xn7Bv2Cl5Kj9Hg x"), "password= --hf-token [REDACTED] x");
  EXPECT_EQ(Redacted("secret= 'api_key': 'k3yV4lu3'"), "secret= 'api_key': '[REDACTED]'");
  EXPECT_EQ(Redacted("PASS= PGPASSWORD=pg-S3cr3t"), "PASS= PGPASSWORD=[REDACTED]");
  // The same for a .netrc password and a SQL PASSWORD (found by redact_fuzz).
  EXPECT_EQ(Redacted("machine h password --hf-token Zq8Wm3Xn7Bv2Cl5Kj9Hg"), "machine h password --hf-token [REDACTED]");
  EXPECT_EQ(Redacted("password 'api_key': 'k3yV4lu3'"), "password 'api_key': '[REDACTED]'");
  EXPECT_EQ(Redacted("Authorization: b --hf-token Zq8Wm3Xn7Bv2Cl5Kj9Hg"), "Authorization: b --hf-token [REDACTED]");
  EXPECT_EQ(Redacted("bearer --hf-token Zq8Wm3Xn7Bv2Cl5Kj9Hg"), "bearer --hf-token [REDACTED]");
  // A value that merely looks like a key=value is still this key's value.
  EXPECT_EQ(Redacted("password: c2VjcmV0= rest"), "password: [REDACTED] rest");
}

TEST(RedactTest, ShellDefaultsAreValues) {
  EXPECT_EQ(Redacted("DB_PASSWORD=${DB_PASSWORD:-hunter2} x"), "DB_PASSWORD=${DB_PASSWORD:-[REDACTED]} x");
  // A value judged harmless is still scanned: a token inside it is found.
  EXPECT_EQ(Redacted("--user \"bob ghp_0123456789abcdefghijABCDEFGHIJklmnop\""), "--user \"bob [REDACTED]\"");
}

TEST(RedactTest, UrlPasswordsWithReservedCharacters) {
  EXPECT_EQ(Redacted("mysql://root:p@ss@word@db:3306/x"), "mysql://root:[REDACTED]@db:3306/x");
  EXPECT_EQ(Redacted("redis://:r3dis/pw#1@cache:6379/0"), "redis://:[REDACTED]@cache:6379/0");
  EXPECT_EQ(Redacted("postgres://ml:p@ss/w0rd#1@db.internal:5432/runs"), "postgres://ml:[REDACTED]@db.internal:5432/runs")
      << "found by redact_fuzz";
  // A port and a path with an '@' in it are not userinfo.
  EXPECT_EQ(Redacted("GET http://localhost:8080/api?mail=a@b.com"), "GET http://localhost:8080/api?mail=a@b.com");
  EXPECT_EQ(Redacted("ssh://git@github.com/org/repo.git"), "ssh://git@github.com/org/repo.git");
}

TEST(RedactTest, WebhookUrlsAreSecretsInTheirPath) {
  EXPECT_EQ(Redacted("notify https://hooks.slack.com/services/T0AB12CD3/B0EF45GH6/aBcDeFgHiJkLmNoPqRsTuVwX done"),
            "notify https://hooks.slack.com/services/[REDACTED] done");
  EXPECT_EQ(Redacted("POST https://discord.com/api/webhooks/123456789012345678/AbCdEf-gHiJkL_mNoPqRsT"),
            "POST https://discord.com/api/webhooks/[REDACTED]");
  EXPECT_EQ(Redacted("https://api.telegram.org/bot123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw/sendMessage"),
            "https://api.telegram.org/bot[REDACTED]/sendMessage");
  EXPECT_EQ(Redacted("https://hooks.slack.com/help"), "https://hooks.slack.com/help");
}

TEST(RedactTest, PasswordsGivenToCommandLineTools) {
  EXPECT_EQ(Redacted("+ mysql -uroot -pS3cr3t! -h db train"), "+ mysql -uroot -p[REDACTED] -h db train");
  EXPECT_EQ(Redacted("+ sshpass -p 'hunter2 x' ssh n1"), "+ sshpass -p '[REDACTED]' ssh n1");
  EXPECT_EQ(Redacted("+ docker login -u bot -p dckrpw123 registry.io"), "+ docker login -u bot -p [REDACTED] registry.io");
  EXPECT_EQ(Redacted("+ curl -fsS -u alice:s3cret https://x"), "+ curl -fsS -u alice:[REDACTED] https://x");
  EXPECT_EQ(Redacted("curl --user bob:pw9 https://x"), "curl --user bob:[REDACTED] https://x");
  EXPECT_EQ(Redacted("redis-cli -h cache -a R3dis!pw ping"), "redis-cli -h cache -a [REDACTED] ping");
  EXPECT_EQ(Redacted("ldapsearch -x -D cn=admin -w LdapPw1 -b dc=x"), "ldapsearch -x -D cn=admin -w [REDACTED] -b dc=x");
  EXPECT_EQ(Redacted("smbclient //fs/share -U alice%Smb!pw"), "smbclient //fs/share -U alice%[REDACTED]");
  EXPECT_EQ(Redacted("openssl rsa -in k.pem -passin pass:0penSSLpw"), "openssl rsa -in k.pem -passin pass:[REDACTED]");
  EXPECT_EQ(Redacted("vault -address=x -password Go0dPw"), "vault -address=x -password [REDACTED]");
  EXPECT_EQ(Redacted("['mysqldump', '-pDumpPw9', 'db']"), "['mysqldump', '-p[REDACTED]', 'db']");
  // The same letters elsewhere are not passwords.
  const std::string kKeep[] = {
      "mkdir -p /tmp/x && docker run -p 8080:80 img", "psql -h db -p 5432 -U app", "ssh -p 2222 host",
      "mysql -p train_db", "tar -xzpf a.tgz", "curl -u alice https://x",
  };
  for (const std::string& line : kKeep) EXPECT_EQ(Redacted(line), line);
}

TEST(RedactTest, SecretsGivenByPosition) {
  EXPECT_EQ(Redacted("+ wandb login 0123456789abcdef0123456789abcdef01234567"), "+ wandb login [REDACTED]");
  EXPECT_EQ(Redacted("+ wandb login --relogin --host https://api.wandb.ai f00dcafe1234"),
            "+ wandb login --relogin --host https://api.wandb.ai [REDACTED]");
  EXPECT_EQ(Redacted("+ aws configure set aws_secret_access_key wJalrXUtnFEMIK7MDENG"),
            "+ aws configure set aws_secret_access_key [REDACTED]");
  EXPECT_EQ(Redacted("machine api.wandb.ai login user password 0123abcd4567"),
            "machine api.wandb.ai login user password [REDACTED]");
  EXPECT_EQ(Redacted("machine h login u password -----BEGIN RSA PRIVATE KEY-----MIIEpAIBAAKCAQEAx7Zk2Lm9-----END RSA "
                     "PRIVATE KEY-----"),
            "machine h login u password [REDACTED]") << "found by redact_fuzz";
  EXPECT_EQ(Redacted("wandb: Appending key for api.wandb.ai to your netrc file: /root/.netrc"),
            "wandb: Appending key for api.wandb.ai to your netrc file: /root/.netrc");
  // A word after "login" is a key only when it looks like one (8 or more, a digit in it).
  EXPECT_EQ(Redacted("wandb login failed: no network"), "wandb login failed: no network");
}

TEST(RedactTest, FormatsFoundWithoutContext) {
  const std::pair<std::string, std::string> kCases[] = {
      {"glpat-AbCdEfGhIjKlMnOpQrSt", "[REDACTED]"},
      {"using dckr_pat_AbCdEfGhIjKlMnOpQrStUvWx0", "using [REDACTED]"},
      {"key xoxe.xoxp-1-AbCdEfGhIjKl", "key [REDACTED]"},
      {"tf token Ab12Cd34Ef56Gh.atlasv1.AbCdEfGhIjKlMnOpQrStUvWxYz0123456789AbCdEfGhIjKlMnOpQrStUvWxYz0123 end",
       "tf token [REDACTED] end"},
      {"azure secret Abc8Q~AbCdEfGhIjKlMnOpQrStUvWxYz01234_ used", "azure secret [REDACTED] used"},
      {"mc 0123456789abcdef0123456789abcdef-us21", "mc [REDACTED]"},
      {"bot 1234567890:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsawX ok", "bot [REDACTED] ok"},
      {"SendGrid SG.AbCdEfGhIjKlMnOpQrStUv.AbCdEfGhIjKlMnOpQrStUvWxYz0123456789AbCdEfG", "SendGrid [REDACTED]"},
      {"databricks dapi0123456789abcdef0123456789abcdef", "databricks [REDACTED]"},
      {"AGE-SECRET-KEY-1QQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQ",
       "[REDACTED]"},
  };
  for (const auto& [in, want] : kCases) EXPECT_EQ(Redacted(in), want) << in;
}

TEST(RedactTest, Base64WrappedPrivateKeysButNotCertificates) {
  // base64("-----BEGIN RSA PRIVATE KEY-----\n...") as a kubeconfig holds it.
  const std::string key = "LS0tLS1CRUdJTiBSU0EgUFJJVkFURSBLRVktLS0tLQpNSUlFcEFJQkFBS0NBUUVB";
  const std::string cert = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUMvekNDQWVlZ0F3SUJBZ0lC";
  EXPECT_EQ(Redacted("    client-key-data: " + key), "    client-key-data: [REDACTED]");
  EXPECT_EQ(Redacted("    client-certificate-data: " + cert), "    client-certificate-data: " + cert);
}

}  // namespace
}  // namespace ithbat::collect::joblog
