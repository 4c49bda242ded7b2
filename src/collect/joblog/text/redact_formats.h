#pragma once
// What the redaction scanner (redact.cc) knows about secrets, as data: credential formats that
// carry their own prefix, webhook URLs whose path is the secret, and the command-line tools
// whose short flags take a password. The shapes follow public secret-scanning rule sets
// (gitleaks' default rules, detect-secrets' plugins, the vendors' own token documentation);
// tests/joblog_text/redaction/ holds a fake instance of each, the test every entry must pass.
#include <cstdint>
#include <string_view>

namespace ithbat::collect::joblog::redact_formats {

// The characters a format's body may hold after its prefix.
enum class Body : uint8_t {
  kAlnum,      // [A-Za-z0-9]
  kHex,        // [0-9a-fA-F]
  kUpperNum,   // [A-Z0-9]
  kWord,       // [A-Za-z0-9_]
  kWordDash,   // [A-Za-z0-9_-]
  kWordDot,    // [A-Za-z0-9_.-]
  kBase64,     // [A-Za-z0-9_+/=-] (standard and url-safe alphabets, padding)
};

// A credential that starts with a fixed prefix at a word start. The scanner reaches it from
// the prefix's first '_', '-' or '.' (the rarest byte of most prefixes), or from its first
// letter when the prefix has no separator (kLetterTriggers below).
struct TokenFormat {
  std::string_view prefix;
  uint16_t min_body;  // body bytes after the prefix, at least
  uint16_t max_body;  // and at most (a longer run is some other word); 0: up to 512
  Body body;
  // The body must hold a digit or an upper-case letter: random keys do, identifiers such as
  // "hf_hub_download" or "sk-learn-something" do not.
  bool mixed;
};

// Prefixes are case-sensitive, as the vendors issue them.
inline constexpr TokenFormat kTokenFormats[] = {
    // Source hosting and package registries.
    {"ghp_", 20, 0, Body::kAlnum, false},  // GitHub classic PAT, OAuth, user, server, refresh
    {"gho_", 20, 0, Body::kAlnum, false},
    {"ghu_", 20, 0, Body::kAlnum, false},
    {"ghs_", 20, 0, Body::kAlnum, false},
    {"ghr_", 20, 0, Body::kAlnum, false},
    {"github_pat_", 20, 0, Body::kWord, false},
    {"glpat-", 20, 0, Body::kWordDot, false},  // GitLab personal, pipeline trigger, deploy, runner, ...
    {"glptt-", 20, 0, Body::kWordDot, false},
    {"gldt-", 20, 0, Body::kWordDot, false},
    {"glrt-", 20, 0, Body::kWordDot, false},
    {"glrtr-", 20, 0, Body::kWordDot, false},
    {"glcbt-", 20, 0, Body::kWordDot, false},
    {"glsoat-", 20, 0, Body::kWordDot, false},
    {"glimt-", 20, 0, Body::kWordDot, false},
    {"glagent-", 20, 0, Body::kWordDot, false},
    {"gloas-", 20, 0, Body::kWordDot, false},
    {"glft-", 20, 0, Body::kWordDot, false},
    {"glffct-", 20, 0, Body::kWordDot, false},
    {"GR1348941", 20, 0, Body::kWordDash, false},  // GitLab runner registration
    {"ATATT", 50, 0, Body::kBase64, false},        // Atlassian API token
    {"ATCTT", 50, 0, Body::kBase64, false},
    {"ATBB", 28, 0, Body::kAlnum, false},          // Bitbucket app password
    {"CCIPAT_", 30, 0, Body::kWord, false},        // CircleCI personal token
    {"npm_", 36, 36, Body::kAlnum, false},
    {"pypi-", 50, 0, Body::kWordDash, false},
    {"rubygems_", 48, 48, Body::kHex, false},
    {"dckr_pat_", 20, 0, Body::kWordDash, false},  // Docker Hub
    {"dckr_oat_", 20, 0, Body::kWordDash, false},
    {"CLOJARS_", 40, 0, Body::kAlnum, false},
    {"AKCp", 60, 0, Body::kAlnum, false},  // JFrog Artifactory
    {"squ_", 40, 40, Body::kHex, false},   // SonarQube user, project, analysis tokens
    {"sqp_", 40, 40, Body::kHex, false},
    {"sqa_", 40, 40, Body::kHex, false},
    // AI and model hubs.
    {"hf_", 20, 0, Body::kAlnum, true},
    {"api_org_", 20, 0, Body::kAlnum, true},  // Hugging Face organisation token
    {"sk-", 20, 0, Body::kWordDash, true},    // OpenAI (sk-proj-, sk-svcacct-), Anthropic (sk-ant-), OpenRouter
    {"gsk_", 40, 0, Body::kAlnum, false},     // Groq
    {"pplx-", 40, 0, Body::kAlnum, false},    // Perplexity
    {"r8_", 30, 0, Body::kAlnum, true},       // Replicate
    {"nvapi-", 40, 0, Body::kWordDash, false},  // NVIDIA API catalog / NGC
    {"tvly-", 24, 0, Body::kWordDash, true},    // Tavily
    {"fw_", 20, 0, Body::kAlnum, true},         // Fireworks AI
    {"jina_", 40, 0, Body::kAlnum, true},
    {"xai-", 60, 0, Body::kAlnum, false},       // xAI
    {"lsv2_pt_", 32, 0, Body::kWord, false},    // LangSmith personal and service keys
    {"lsv2_sk_", 32, 0, Body::kWord, false},
    // Cloud providers and infrastructure.
    {"AKIA", 16, 16, Body::kUpperNum, false},  // AWS access key id (long-term, temporary, ...)
    {"ASIA", 16, 16, Body::kUpperNum, false},
    {"ABIA", 16, 16, Body::kUpperNum, false},
    {"ACCA", 16, 16, Body::kUpperNum, false},
    {"AIza", 30, 0, Body::kWordDash, false},  // Google API key
    {"ya29.", 30, 0, Body::kWordDot, false},  // Google OAuth access token
    {"AKID", 32, 0, Body::kAlnum, false},     // Tencent Cloud
    {"LTAI", 12, 30, Body::kAlnum, false},    // Alibaba Cloud
    {"dop_v1_", 64, 64, Body::kHex, false},   // DigitalOcean personal, OAuth, refresh
    {"doo_v1_", 64, 64, Body::kHex, false},
    {"dor_v1_", 64, 64, Body::kHex, false},
    {"HRKU-", 20, 0, Body::kWordDash, false},  // Heroku
    {"hvs.", 24, 0, Body::kWordDash, false},   // HashiCorp Vault service, batch, recovery
    {"hvb.", 24, 0, Body::kWordDash, false},
    {"hvr.", 24, 0, Body::kWordDash, false},
    {"dp.pt.", 40, 0, Body::kAlnum, false},  // Doppler personal, service, CLI, SCIM, audit, service account
    {"dp.st.", 40, 0, Body::kWordDot, false},
    {"dp.ct.", 40, 0, Body::kAlnum, false},
    {"dp.sa.", 40, 0, Body::kAlnum, false},
    {"dp.scim.", 40, 0, Body::kAlnum, false},
    {"dp.audit.", 40, 0, Body::kAlnum, false},
    {"pul-", 40, 40, Body::kHex, false},      // Pulumi
    {"sbp_", 40, 0, Body::kAlnum, false},     // Supabase
    {"pscale_tkn_", 32, 0, Body::kWordDot, false},  // PlanetScale
    {"pscale_pw_", 32, 0, Body::kWordDot, false},
    {"pscale_oauth_", 32, 0, Body::kWordDot, false},
    {"fm1r_", 40, 0, Body::kBase64, false},  // Fly.io macaroons
    {"fm1a_", 40, 0, Body::kBase64, false},
    {"fm2_", 40, 0, Body::kBase64, false},
    {"dt0c01.", 80, 0, Body::kWordDot, false},  // Dynatrace
    {"glc_", 32, 0, Body::kBase64, false},       // Grafana Cloud
    {"glsa_", 32, 0, Body::kWordDash, false},    // Grafana service account
    {"NRAK-", 27, 27, Body::kUpperNum, false},   // New Relic user API key
    {"sntrys_", 40, 0, Body::kBase64, false},    // Sentry org and user tokens
    {"sntryu_", 64, 64, Body::kHex, false},
    {"dapi", 32, 32, Body::kHex, false},         // Databricks
    {"pnu_", 36, 36, Body::kAlnum, false},       // Prefect
    {"ops_", 50, 0, Body::kBase64, false},       // 1Password service account
    // Collaboration, payments, messaging.
    {"xoxb-", 10, 0, Body::kWordDash, false},  // Slack bot, user, app-level, config, legacy
    {"xoxp-", 10, 0, Body::kWordDash, false},
    {"xoxa-", 10, 0, Body::kWordDash, false},
    {"xoxo-", 10, 0, Body::kWordDash, false},
    {"xoxs-", 10, 0, Body::kWordDash, false},
    {"xoxr-", 10, 0, Body::kWordDash, false},
    {"xoxe-", 10, 0, Body::kWordDash, false},
    {"xoxe.", 10, 0, Body::kWordDot, false},
    {"xapp-", 10, 0, Body::kWordDash, false},
    {"lin_api_", 40, 0, Body::kAlnum, false},  // Linear
    {"ntn_", 40, 0, Body::kAlnum, false},      // Notion (and its older secret_ keys)
    {"secret_", 43, 43, Body::kAlnum, true},
    {"PMAK-", 24, 0, Body::kWordDash, false},  // Postman
    {"figd_", 40, 0, Body::kWordDash, false},  // Figma
    {"sk_live_", 20, 0, Body::kAlnum, false},  // Stripe secret and restricted keys, webhook secret
    {"sk_test_", 20, 0, Body::kAlnum, false},
    {"rk_live_", 20, 0, Body::kAlnum, false},
    {"rk_test_", 20, 0, Body::kAlnum, false},
    {"whsec_", 24, 0, Body::kAlnum, false},
    {"sq0atp-", 22, 0, Body::kWordDash, false},  // Square
    {"sq0csp-", 40, 0, Body::kWordDash, false},
    {"EAAA", 60, 0, Body::kWordDash, false},    // Square production access token
    {"EAAC", 80, 0, Body::kAlnum, false},       // Facebook / Meta access tokens
    {"EAAG", 80, 0, Body::kAlnum, false},
    {"EAAB", 80, 0, Body::kAlnum, false},
    {"EAAI", 80, 0, Body::kAlnum, false},
    {"shpat_", 32, 32, Body::kHex, false},  // Shopify access, custom app, private app, shared secret
    {"shpca_", 32, 32, Body::kHex, false},
    {"shppa_", 32, 32, Body::kHex, false},
    {"shpss_", 32, 32, Body::kHex, false},
    {"SK", 32, 32, Body::kHex, false},       // Twilio API key
    {"SG.", 60, 0, Body::kWordDot, false},   // SendGrid: SG.<22>.<43>
    {"xkeysib-", 64, 0, Body::kWordDash, false},  // Brevo (Sendinblue)
    {"xsmtpsib-", 64, 0, Body::kWordDash, false},
    {"key-", 32, 32, Body::kHex, false},           // Mailgun
    {"FLWSECK-", 32, 0, Body::kWordDash, false},   // Flutterwave
    {"FLWSECK_TEST-", 32, 0, Body::kWordDash, false},
    {"EZAK", 54, 0, Body::kAlnum, false},  // EasyPost
    {"duffel_live_", 40, 0, Body::kWordDash, false},
    {"duffel_test_", 40, 0, Body::kWordDash, false},
    {"sl.", 100, 0, Body::kWordDash, false},  // Dropbox short-lived
    // Keys.
    {"AGE-SECRET-KEY-1", 58, 58, Body::kUpperNum, false},
};

// The letters a format without a separator in its prefix is found from (at a word start).
// Every other format is found from its prefix's first separator.
inline constexpr std::string_view kLetterTriggers = "AEGLSd";

// A URL whose path (after `path`) is itself the credential: anyone holding it can post.
struct WebhookUrl {
  std::string_view host;  // exact, or a suffix when it starts with '.'
  std::string_view path;  // the path prefix after which everything is secret
  bool one_segment;       // only the path segment after it (Telegram /bot<token>/method)
};
inline constexpr WebhookUrl kWebhookUrls[] = {
    {"hooks.slack.com", "/services/", false},
    {"hooks.slack.com", "/workflows/", false},
    {"hooks.slack.com", "/triggers/", false},
    {"discord.com", "/api/webhooks/", false},
    {"discordapp.com", "/api/webhooks/", false},
    {"canary.discord.com", "/api/webhooks/", false},
    {"ptb.discord.com", "/api/webhooks/", false},
    {".webhook.office.com", "/webhookb2/", false},
    {"outlook.office.com", "/webhook/", false},
    {"outlook.office365.com", "/webhook/", false},
    {"api.telegram.org", "/bot", true},
    {"api.telegram.org", "/file/bot", true},
    {"hooks.zapier.com", "/hooks/catch/", false},
    {"maker.ifttt.com", "/with/key/", false},
    {"events.pagerduty.com", "/integration/", false},
    {"conda.anaconda.org", "/t/", true},  // a private channel's token
};

// A command-line tool whose short flag takes a password (the letter means something else
// elsewhere: `mkdir -p`, `docker run -p 8080:80`, `psql -p 5432`, so the tool must be named
// earlier on the line).
enum class FlagValue : uint8_t {
  kWhole,        // the value is the password
  kAfterColon,   // user:password
  kAfterPercent, // user%password (Samba)
  kAfterComma,   // user,password (lftp)
};
struct ToolFlag {
  std::string_view tool;  // the program's basename
  char flag;
  bool attached;   // -pSECRET
  bool separate;   // -p SECRET
  FlagValue value;
  bool after_login;  // only after a "login" word (docker login -p, not docker run -p)
};
inline constexpr ToolFlag kToolFlags[] = {
    // MySQL/MariaDB: "-p SECRET" prompts and SECRET is the database, so only the attached form.
    {"mysql", 'p', true, false, FlagValue::kWhole, false},
    {"mysqldump", 'p', true, false, FlagValue::kWhole, false},
    {"mysqladmin", 'p', true, false, FlagValue::kWhole, false},
    {"mysqlimport", 'p', true, false, FlagValue::kWhole, false},
    {"mysqlcheck", 'p', true, false, FlagValue::kWhole, false},
    {"mysqlshow", 'p', true, false, FlagValue::kWhole, false},
    {"mariadb", 'p', true, false, FlagValue::kWhole, false},
    {"mariadb-dump", 'p', true, false, FlagValue::kWhole, false},
    {"mariadb-admin", 'p', true, false, FlagValue::kWhole, false},
    {"sshpass", 'p', true, true, FlagValue::kWhole, false},
    {"docker", 'p', true, true, FlagValue::kWhole, true},
    {"podman", 'p', true, true, FlagValue::kWhole, true},
    {"nerdctl", 'p', true, true, FlagValue::kWhole, true},
    {"buildah", 'p', true, true, FlagValue::kWhole, true},
    {"skopeo", 'p', true, true, FlagValue::kWhole, true},
    {"helm", 'p', true, true, FlagValue::kWhole, true},
    {"oras", 'p', true, true, FlagValue::kWhole, true},
    {"az", 'p', true, true, FlagValue::kWhole, true},
    {"oc", 'p', true, true, FlagValue::kWhole, true},
    {"cf", 'p', true, true, FlagValue::kWhole, true},
    {"redis-cli", 'a', false, true, FlagValue::kWhole, false},
    {"valkey-cli", 'a', false, true, FlagValue::kWhole, false},
    {"keydb-cli", 'a', false, true, FlagValue::kWhole, false},
    {"ldapsearch", 'w', false, true, FlagValue::kWhole, false},
    {"ldapmodify", 'w', false, true, FlagValue::kWhole, false},
    {"ldapadd", 'w', false, true, FlagValue::kWhole, false},
    {"ldapdelete", 'w', false, true, FlagValue::kWhole, false},
    {"ldapwhoami", 'w', false, true, FlagValue::kWhole, false},
    {"ldappasswd", 'w', false, true, FlagValue::kWhole, false},
    {"ldapcompare", 'w', false, true, FlagValue::kWhole, false},
    {"ldapmodrdn", 'w', false, true, FlagValue::kWhole, false},
    {"mongo", 'p', false, true, FlagValue::kWhole, false},
    {"mongosh", 'p', false, true, FlagValue::kWhole, false},
    {"mongodump", 'p', false, true, FlagValue::kWhole, false},
    {"mongorestore", 'p', false, true, FlagValue::kWhole, false},
    {"mongoexport", 'p', false, true, FlagValue::kWhole, false},
    {"mongoimport", 'p', false, true, FlagValue::kWhole, false},
    {"sqlcmd", 'P', true, true, FlagValue::kWhole, false},
    {"bcp", 'P', true, true, FlagValue::kWhole, false},
    {"zip", 'P', false, true, FlagValue::kWhole, false},
    {"unzip", 'P', false, true, FlagValue::kWhole, false},
    {"7z", 'p', true, false, FlagValue::kWhole, false},
    {"7za", 'p', true, false, FlagValue::kWhole, false},
    {"smbclient", 'U', true, true, FlagValue::kAfterPercent, false},
    {"rpcclient", 'U', true, true, FlagValue::kAfterPercent, false},
    {"curl", 'u', true, true, FlagValue::kAfterColon, false},
    {"curl", 'U', true, true, FlagValue::kAfterColon, false},  // --proxy-user
    {"http", 'a', true, true, FlagValue::kAfterColon, false},  // HTTPie --auth
    {"https", 'a', true, true, FlagValue::kAfterColon, false},
    {"xh", 'a', true, true, FlagValue::kAfterColon, false},
    {"lftp", 'u', true, true, FlagValue::kAfterComma, false},
    {"ssh-keygen", 'N', false, true, FlagValue::kWhole, false},  // new passphrase
    {"ssh-keygen", 'P', false, true, FlagValue::kWhole, false},  // old passphrase
};

// Tools that take a credential as a plain (non-flag) word: the `nth` plain word after the word
// `after` that follows the tool (`wandb login KEY`, `mc alias set NAME URL ACCESS SECRET`,
// `htpasswd -b FILE USER PASSWORD`). `aws configure set KEY VALUE` and `sqlplus user/pw@db`
// are rules of their own (redact.cc).
struct PositionalSecret {
  std::string_view tool;
  std::string_view after;
  int nth;
};
inline constexpr PositionalSecret kPositionalSecrets[] = {
    {"wandb", "login", 1},
    {"vault", "login", 1},
    {"ngrok", "authtoken", 1},
    {"ngrok", "add-authtoken", 1},
    {"mc", "alias", 5},
    {"rabbitmqctl", "add_user", 2},
    {"rabbitmqctl", "change_password", 2},
    {"htpasswd", "-b", 3},
    {"htpasswd", "-bc", 3},
    {"htpasswd", "-cb", 3},
    {"htpasswd", "-bB", 3},
    {"htpasswd", "-Bb", 3},
};

}  // namespace ithbat::collect::joblog::redact_formats
