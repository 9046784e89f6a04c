#!/usr/bin/env perl
# stdout.pl: same contract as utils/run.pl, but each job's output is also copied to stdout
# (handy in CI).  Usage: stdout.pl [options] [JOB=1:N] <log-file> <command...>
# Implemented by running utils/run.pl in this interpreter, which checks the program name.
use strict;
use warnings;
use File::Basename qw(dirname);
use File::Spec;
my $run_pl = File::Spec->rel2abs(dirname($0)) . "/run.pl";
do $run_pl;
die "stdout.pl: failed to load $run_pl: " . ($@ || $!) . "\n";
