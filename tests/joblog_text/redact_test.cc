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

TEST(RedactTest, SecretSafeCutNeverKeepsHalfAToken) {
  const std::string line = "error while using hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345 to download";
  const size_t in_token = line.find("hf_") + 8;
  const size_t cut = SecretSafeCut(line, in_token);
  EXPECT_EQ(cut, line.find("hf_")) << "the cut backs off to before the token";
  EXPECT_EQ(SecretSafeCut(line, line.size()), line.size());
  EXPECT_EQ(SecretSafeCut(line, 5), 5u) << "between words: cut where asked";
  // A run longer than 64 bytes keeps its first part: long enough for every token rule.
  const std::string long_run = "x " + std::string(100, 'a');
  EXPECT_EQ(SecretSafeCut(long_run, 90), 90u);
  // UTF-8: never inside a sequence.
  const std::string utf8 = "loss \xc3\xa9t\xc3\xa9";
  EXPECT_EQ(SecretSafeCut(utf8, 6), 5u);
}

}  // namespace
}  // namespace ithbat::collect::joblog
