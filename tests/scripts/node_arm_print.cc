// Prints, for each node id given on the command line after the experiment
// file, the id, its hash point (NodeHashUnit, 17 significant digits) and its
// arm's name under that file: what scripts/ab_report.py's port of the hash is
// checked against (tests/scripts/ab_report_test.py).
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "server/experiment.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: node_arm_print EXPERIMENT_FILE NODE_ID...\n";
    return 2;
  }
  std::ifstream in(argv[1]);
  std::stringstream text;
  text << in.rdbuf();
  auto experiment = kvlearn::ParseExperiment(text.str(), argv[1]);
  if (!experiment.ok()) {
    std::cerr << experiment.status().message() << "\n";
    return 1;
  }
  for (int i = 2; i < argc; ++i) {
    std::printf("%s\t%.17g\t%s\n", argv[i], kvlearn::NodeHashUnit(argv[i]),
                experiment->arms[experiment->ArmOf(argv[i])].name.c_str());
  }
  return 0;
}
