// Placeholder until the CLI lands: the build needs an entry point.
int main() { return 0; }
