#!/usr/bin/env perl
# run.pl: run a command (or an array of JOB-indexed commands) locally, logging each to a file.
# Our own implementation of the Kaldi run.pl command-line contract.
use strict;
use warnings;
use File::Basename qw(dirname basename);
use File::Path qw(make_path);
use POSIX qw(:sys_wait_h);

my $prog = basename($0);
# stdout.pl is run.pl that also echoes the job output to the terminal.
my $tee = ($prog eq "stdout.pl") ? 1 : 0;

my $usage = <<"END";
Usage: $prog [options] [JOB=1:N] <log-file> <command...>
 e.g.: $prog JOB=1:4 exp/foo/log/decode.JOB.log caption_decode --feats_scp keys.JOB.scp
Runs <command> through "bash -c" on this machine; with JOB=1:N runs N jobs in parallel,
replacing the variable (any name, e.g. JOB) in the log file name and the command.
Arguments are joined with spaces, those containing whitespace single-quoted; a single
argument is used verbatim as a shell snippet (e.g. "a | b > c").
Each log starts with "# <command>" and "# Started at <date>" and ends with
"# Accounting: time=<s> threads=<n>" and "# Ended (code <c>) at <date>".
Exits 1 if any job failed ("K / N failed, log is in <log-file>" on stderr).
Options:
  --max-jobs-run N   run at most N jobs at a time (default: number of CPUs, from nproc;
                     OMP_NUM_THREADS sets the threads of a job and does not lower it)
  --gpu N            GPUs per job (default 0). The visible GPUs (CUDA_VISIBLE_DEVICES, else
                     nvidia-smi -L) form (visible GPUs / N) slots of N: at most that many
                     jobs run at a time, each with CUDA_VISIBLE_DEVICES set to its own slot
  --num-nodes N      1 (more is an error: jobs run on this machine)
  --mem X, --num-threads N, --time T, --config FILE
                     accepted for compatibility with slurm.pl and ignored
                     (num-threads is reported in the Accounting line)
Options may use dashes or underscores (--max_jobs_run).
END
$usage .= "stdout.pl also copies each job's output to stdout.\n" if $tee;

sub die_usage {
  my ($msg) = @_;
  print STDERR "$prog: $msg\n" if defined $msg;
  print STDERR $usage;
  exit 1;
}

# The CPUs this process may use (nproc: affinity, and in recent coreutils cgroup CPU quotas).
# GNU nproc also honours OMP_NUM_THREADS and OMP_THREAD_LIMIT, which set the threads of ONE job
# (the user, a cluster job or the tests may set OMP_NUM_THREADS=1): they must not cap the number
# of jobs, so nproc runs without them.
sub num_cpus {
  my $n = 0;
  delete local @ENV{qw(OMP_NUM_THREADS OMP_THREAD_LIMIT)};
  if (open(my $fh, "-|", "nproc 2>/dev/null")) {
    my $l = <$fh>;
    close($fh);
    $n = $1 if defined $l && $l =~ /^(\d+)/;
  }
  return $n > 0 ? $n : 1;
}

# The visible GPUs: the entries of CUDA_VISIBLE_DEVICES, else 0..N-1 for nvidia-smi's N.
sub visible_gpus {
  if (defined $ENV{CUDA_VISIBLE_DEVICES} && $ENV{CUDA_VISIBLE_DEVICES} =~ /\S/) {
    return grep { /\S/ } map { s/^\s+|\s+$//gr } split(/,/, $ENV{CUDA_VISIBLE_DEVICES});
  }
  my $n = 0;
  if (open(my $fh, "-|", "nvidia-smi -L 2>/dev/null")) {
    while (<$fh>) { $n++ if /^GPU\s/; }
    close($fh);
  }
  return (0 .. $n - 1);
}

# ---- options
my $max_jobs_run = undef;
my $gpu = 0;
my $num_threads = 1;
my %known = map { $_ => 1 } qw(max_jobs_run gpu mem num_threads time config num_nodes);
while (@ARGV && $ARGV[0] =~ /^--/) {
  my $opt = shift @ARGV;
  die_usage() if $opt eq "--help";
  last if $opt eq "--";
  die_usage("options of the form --name=value are not supported: '$opt'") if $opt =~ /=/;
  (my $name = substr($opt, 2)) =~ s/-/_/g;
  die_usage("unknown option $opt") unless $known{$name};
  die_usage("option $opt requires a value") unless @ARGV;
  my $val = shift @ARGV;
  if ($name eq "max_jobs_run") {
    die_usage("--max-jobs-run must be a positive integer, got '$val'") unless $val =~ /^\d+$/ && $val > 0;
    $max_jobs_run = $val;
  } elsif ($name eq "gpu") {
    die_usage("--gpu must be a non-negative integer, got '$val'") unless $val =~ /^\d+$/;
    $gpu = $val;
  } elsif ($name eq "num_nodes") {
    die_usage("--num-nodes must be a positive integer, got '$val'") unless $val =~ /^\d+$/ && $val > 0;
    die "$prog: --num-nodes $val: $prog runs jobs on this machine only; "
      . "multi-node jobs need a cluster backend (slurm.pl)\n" if $val > 1;
  } elsif ($name eq "num_threads") {
    die_usage("--num-threads must be a positive integer, got '$val'") unless $val =~ /^\d+$/ && $val > 0;
    $num_threads = $val;
  }
  # mem, time, config: accepted and ignored.
}
die_usage() if @ARGV && ($ARGV[0] eq "-h" || $ARGV[0] eq "--help");

my ($jobvar, $jobstart, $jobend) = (undef, 1, 1);
if (@ARGV && $ARGV[0] =~ /^([A-Za-z_]\w*)=(\d+)(?::(\d+))?$/) {
  ($jobvar, $jobstart, $jobend) = ($1, $2, defined $3 ? $3 : $2);
  shift @ARGV;
  die_usage("invalid job range $jobvar=$jobstart:$jobend") if $jobend < $jobstart;
} elsif (@ARGV && $ARGV[0] =~ /^[A-Za-z_]\w*=\S*$/ && $ARGV[0] !~ m{/}) {
  die_usage("invalid job range '$ARGV[0]' (expected e.g. JOB=1:10)");
}
while (@ARGV && $ARGV[0] =~ /^--/) {    # options after the range are a user error
  die_usage("options must come before the job range: '$ARGV[0]'");
}
die_usage("missing <log-file> and <command>") if @ARGV < 2;

my $logfile = shift @ARGV;
if (defined $jobvar && index($logfile, $jobvar) < 0) {
  print STDERR "$prog: the log file name '$logfile' does not contain the job variable $jobvar; "
    . "the $jobvar=$jobstart:$jobend jobs would overwrite each other's log\n";
  exit 1;
}

# Join the command; quote arguments that contain whitespace (or are empty) so that they
# survive "bash -c" as one word; other arguments go as they are (so "|" or ">" still work).
my @words;
foreach my $a (@ARGV) {
  if ($a =~ /^\S+$/) {
    push @words, $a;
  } else {
    (my $q = $a) =~ s/'/'\\''/g;
    push @words, "'$q'";
  }
}
# A single command argument is taken as a shell snippet, verbatim ("cmd1 | cmd2; cmd3").
my $cmd = (@ARGV == 1) ? $ARGV[0] : join(" ", @words);

my $njobs = $jobend - $jobstart + 1;
my $limit = defined $max_jobs_run ? $max_jobs_run : num_cpus();
# --gpu N: slots of N visible GPUs; a job runs with CUDA_VISIBLE_DEVICES set to a free slot
# (with fewer visible GPUs than N, one slot of all of them; with none, the variable is left alone)
my @free_slots;
if ($gpu > 0) {
  my @g = visible_gpus();
  my $by_gpu = int(@g / $gpu);
  if (@g) {
    @free_slots = $by_gpu < 1 ? (join(",", @g))
                              : map { join(",", @g[$_ * $gpu .. $_ * $gpu + $gpu - 1]) } (0 .. $by_gpu - 1);
  }
  $by_gpu = 1 if $by_gpu < 1;
  $limit = $by_gpu if $by_gpu < $limit;
}

sub subst {
  my ($s, $id) = @_;
  return $s unless defined $jobvar;
  $s =~ s/\Q$jobvar\E/$id/g;
  return $s;
}

# Runs one job in the current (child) process; returns its exit code.
sub run_job {
  my ($id) = @_;
  my $log = subst($logfile, $id);
  my $jcmd = subst($cmd, $id);
  my $dir = dirname($log);
  eval { make_path($dir) unless -d $dir; };
  my $lfh;
  unless (open($lfh, ">", $log)) {
    print STDERR "$prog: cannot write log file $log: $!\n";
    return 1;
  }
  $lfh->autoflush(1);
  print $lfh "# $jcmd\n# Started at " . localtime() . "\n";
  my $t0 = time();
  my $status;
  # The command runs in its own process group; a TERM/INT/HUP sent to this job (e.g. run.pl
  # killed, or Ctrl-C) is forwarded to that whole group, so no trainer keeps running alone.
  my $pid;
  local @SIG{qw(TERM INT HUP)} = (sub { kill $_[0], -$pid if $pid; }) x 3;
  if ($tee) {
    $pid = open(my $out, "-|");
    if (!defined $pid) { print $lfh "$prog: fork failed: $!\n"; $status = 255 << 8; }
    elsif ($pid == 0) {
      setpgrp(0, 0);
      open(STDERR, ">&", \*STDOUT);
      exec("bash", "-c", $jcmd) or do { print "exec bash failed: $!\n"; POSIX::_exit(127); };
    } else {
      STDOUT->autoflush(1);
      while (my $l = <$out>) { print $lfh $l; print STDOUT $l; }
      close($out);
      $status = $?;
    }
  } else {
    $pid = fork();
    if (!defined $pid) { print $lfh "$prog: fork failed: $!\n"; $status = 255 << 8; }
    elsif ($pid == 0) {
      setpgrp(0, 0);
      open(STDOUT, ">&", $lfh) or POSIX::_exit(127);
      open(STDERR, ">&", $lfh) or POSIX::_exit(127);
      exec("bash", "-c", $jcmd) or do { print STDERR "exec bash failed: $!\n"; POSIX::_exit(127); };
    } else {
      waitpid($pid, 0);
      $status = $?;
    }
  }
  my $code = ($status & 127) ? 128 + ($status & 127) : ($status >> 8);
  my $elapsed = time() - $t0;
  print $lfh "# Accounting: time=$elapsed threads=$num_threads\n";
  print $lfh "# Ended (code $code) at " . localtime() . "\n";
  close($lfh);
  return $code;
}

# ---- schedule the jobs, at most $limit at a time
my %running;    # pid -> job id
my %slot_of;    # pid -> its GPU slot (--gpu N)
my %code;       # job id -> exit code
my $next = $jobstart;
my $stopped;    # a signal stopped the run: forward it to the running jobs, start no more
@SIG{qw(TERM INT HUP)} = (sub { $stopped = $_[0]; kill $_[0], keys %running; }) x 3;
while ($next <= $jobend || %running) {
  while (!$stopped && $next <= $jobend && scalar(keys %running) < $limit) {
    my $slot = shift @free_slots;
    my $pid = fork();
    die "$prog: fork failed: $!\n" unless defined $pid;
    if ($pid == 0) {
      $ENV{CUDA_VISIBLE_DEVICES} = $slot if defined $slot;
      my $c = run_job($next);
      POSIX::_exit($c > 255 ? 255 : $c);
    }
    $running{$pid} = $next++;
    $slot_of{$pid} = $slot if defined $slot;
  }
  my $pid = waitpid(-1, 0);
  last if $pid < 0;
  next unless exists $running{$pid};
  my $id = delete $running{$pid};
  push @free_slots, delete $slot_of{$pid} if exists $slot_of{$pid};
  my $st = $?;
  $code{$id} = ($st & 127) ? 128 + ($st & 127) : ($st >> 8);
}

if ($stopped) {
  print STDERR "$prog: stopped by SIG$stopped (forwarded to the running jobs), log is in $logfile\n";
  exit 1;
}
my $failed = grep { !defined $code{$_} || $code{$_} != 0 } ($jobstart .. $jobend);
if ($failed) {
  print STDERR "$prog: $failed / $njobs failed, log is in $logfile\n";
  exit 1;
}
exit 0;
