// `specstate`: the command line of the library (check-golden, simulate, plan).
#include "cli/commands.h"

int main(int argc, char** argv) { return specstate::cli::run(argc, argv); }
