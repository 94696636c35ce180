#pragma once

namespace memwire::cli {

// Each returns the program's exit status; `first` is the index of the first word after the
// subcommand's name.
int serve(int argc, char** argv, int first);
int get(int argc, char** argv, int first);
int ls(int argc, char** argv, int first);

}  // namespace memwire::cli
