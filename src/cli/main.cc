// The entry point, alone so that everything else is a library the tests link.
#include "cli/app.h"

int main(int argc, char** argv) { return ithbat::cli::Main(argc, argv); }
