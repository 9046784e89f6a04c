#!/usr/bin/env perl
# slurm.pl: run a command (or an array of JOB-indexed commands) as one Slurm array job.
# Our own implementation of the Kaldi slurm.pl/queue.pl command-line contract; same interface,
# log format and exit semantics as utils/run.pl.
use strict;
use warnings;
use Cwd qw(getcwd abs_path);
use File::Basename qw(dirname basename);
use File::Path qw(make_path);
use POSIX ();
use Time::HiRes ();

my $prog = basename($0);
my $usage = <<"END";
Usage: $prog [options] [JOB=1:N] <log-file> <command...>
 e.g.: $prog --gpu 1 --mem 8G JOB=1:4 exp/foo/log/decode.JOB.log caption_decode --feats_scp keys.JOB.scp
Submits ONE "sbatch --array=1-N" job running a generated bash script (<log-dir>/q/<name>.sh)
that runs <command> (JOB replaced by the task id) and writes <log-file> exactly as run.pl does;
then waits for all tasks (each writes <log-dir>/q/done.<id>.<task> with its exit code),
checking with squeue that the job is still alive. Exits 1 if any task failed
("K / N failed, log is in <log-file>" on stderr).
Options (dashes or underscores):
  --config FILE       option mapping (default: conf/slurm.conf if it exists, else built-in)
  --gpu N  --mem X  --num-threads N  --time T
                      mapped to sbatch options by the config lines
  --max-jobs-run N    at most N tasks at a time (array spec 1-N%M)
Config lines:
  command sbatch --export=PATH          the submit command and its fixed options
  option gpu=0                          exact value -> these options (here none)
  option gpu=* -p gpu --gres=gpu:\$0     any value -> these options, \$0 = the value
  default gpu=0                         value used when the option is not given
Environment (for tests/tuning): SLURM_PL_POLL_MAX (s, default 10),
  SLURM_PL_SQUEUE_INTERVAL (s, default 60), SLURM_PL_GRACE (s, default 120: how long to
  wait for done files after squeue stops listing the job).
END

my $default_config = <<'END';
command sbatch --export=PATH
option time=* --time $0
option mem=* --mem-per-cpu $0
option mem=0
option num_threads=* --cpus-per-task $0
option num_threads=1 --cpus-per-task 1
option gpu=* -p gpu --gres=gpu:$0
option gpu=0
option max_jobs_run=*
default gpu=0
END

sub die_usage {
  my ($msg) = @_;
  print STDERR "$prog: $msg\n" if defined $msg;
  print STDERR $usage;
  exit 1;
}

sub fail {
  print STDERR "$prog: $_[0]\n";
  exit 1;
}

# ---- command-line options (name => value), in order
my @opts;
my $config;
while (@ARGV && $ARGV[0] =~ /^--/) {
  my $opt = shift @ARGV;
  die_usage() if $opt eq "--help";
  last if $opt eq "--";
  die_usage("options of the form --name=value are not supported: '$opt'") if $opt =~ /=/;
  (my $name = substr($opt, 2)) =~ s/-/_/g;
  die_usage("option $opt requires a value") unless @ARGV;
  my $val = shift @ARGV;
  if ($name eq "config") { $config = $val; next; }
  die_usage("bad option name $opt") unless $name =~ /^[A-Za-z_]\w*$/;
  push @opts, [$name, $val];
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
die_usage("options must come before the job range: '$ARGV[0]'") if @ARGV && $ARGV[0] =~ /^--/;
die_usage("missing <log-file> and <command>") if @ARGV < 2;
my $logfile = shift @ARGV;
if (defined $jobvar && index($logfile, $jobvar) < 0) {
  fail("the log file name '$logfile' does not contain the job variable $jobvar; "
    . "the $jobvar=$jobstart:$jobend jobs would overwrite each other's log");
}

my @words;
foreach my $a (@ARGV) {
  if ($a =~ /^\S+$/) { push @words, $a; }
  else { (my $q = $a) =~ s/'/'\\''/g; push @words, "'$q'"; }
}
my $cmd = (@ARGV == 1) ? $ARGV[0] : join(" ", @words);

# ---- config
my $config_text;
my $config_name;
if (defined $config) {
  fail("config file '$config' not found") unless -f $config;
} elsif (-f "conf/slurm.conf") {
  $config = "conf/slurm.conf";
}
if (defined $config) {
  open(my $fh, "<", $config) or fail("cannot read config $config: $!");
  local $/;
  $config_text = <$fh>;
  close($fh);
  $config_name = $config;
} else {
  $config_text = $default_config;
  $config_name = "(built-in config)";
}
my @submit;            # the submit command and its fixed options
my %exact;             # "name=value" -> [args]
my %star;              # name -> [args with $0]
my %defaults;          # name -> value
my %known = (max_jobs_run => 1);
my $ln = 0;
foreach my $line (split(/\n/, $config_text)) {
  $ln++;
  $line =~ s/#.*$//;
  $line =~ s/^\s+|\s+$//g;
  next if $line eq "";
  my @f = split(/\s+/, $line);
  my $kind = shift @f;
  if ($kind eq "command") {
    fail("$config_name:$ln: empty command line") unless @f;
    @submit = @f;
  } elsif ($kind eq "option" || $kind eq "default") {
    my $spec = shift @f;
    fail("$config_name:$ln: expected '$kind name=value ...', got '$line'")
      unless defined $spec && $spec =~ /^([A-Za-z_]\w*)=(\S+)$/;
    my ($n, $v) = ($1, $2);
    $known{$n} = 1;
    if ($kind eq "default") {
      fail("$config_name:$ln: 'default' takes no options") if @f;
      $defaults{$n} = $v;
    } elsif ($v eq "*") {
      $star{$n} = [@f];
    } else {
      $exact{"$n=$v"} = [@f];
    }
  } else {
    fail("$config_name:$ln: unknown line type '$kind' (expected command, option or default)");
  }
}
fail("$config_name: no 'command' line") unless @submit;

# ---- map options
my %given = map { $_->[0] => $_->[1] } @opts;
foreach my $n (sort keys %defaults) {
  push @opts, [$n, $defaults{$n}] unless exists $given{$n};
}
my @sbatch_opts;
my $max_jobs_run;
my $num_threads = 1;
foreach my $o (@opts) {
  my ($n, $v) = @$o;
  fail("option --$n is not known to $config_name (no 'option $n=...' line)") unless $known{$n};
  if ($n eq "max_jobs_run") {
    fail("--max-jobs-run must be a positive integer, got '$v'") unless $v =~ /^\d+$/ && $v > 0;
    $max_jobs_run = $v;
  }
  $num_threads = $v if $n eq "num_threads" && $v =~ /^\d+$/;
  my $args;
  if (exists $exact{"$n=$v"}) {
    $args = $exact{"$n=$v"};
  } elsif (exists $star{$n}) {
    $args = [map { (my $x = $_) =~ s/\$0/$v/g; $x } @{$star{$n}}];
  } elsif ($n eq "max_jobs_run") {
    $args = [];
  } else {
    fail("no line in $config_name matches --$n $v (need 'option $n=$v ...' or 'option $n=* ...')");
  }
  push @sbatch_opts, @$args;
}

# ---- write the job script
my $njobs = $jobend - $jobstart + 1;
my $logdir = dirname($logfile);
my $qdir = "$logdir/q";
eval { make_path($qdir) unless -d $qdir; };
fail("cannot create directory $qdir") unless -d $qdir;
$qdir = abs_path($qdir);
my $cwd = getcwd();
my $base = basename($logfile);
$base =~ s/\.log$//;
if (defined $jobvar) {
  $base =~ s/[._-]?\Q$jobvar\E//g;
}
$base =~ s/[^A-Za-z0-9._-]/_/g;
$base = "job" if $base eq "";
my $id = $$;
my $script = "$qdir/$base.sh";
for my $t ($jobstart .. $jobend) { unlink("$qdir/done.$id.$t"); }

sub shq {
  (my $s = $_[0]) =~ s/'/'\\''/g;
  return "'$s'";
}

my $array = "$jobstart-$jobend";
$array .= "%$max_jobs_run" if defined $max_jobs_run && $max_jobs_run < $njobs;
my @sbatch = (@submit, "--job-name=$base", @sbatch_opts, "--array=$array",
  "--output=$qdir/$base-%a.out", $script);

my $subst = defined $jobvar
  ? "cmd=\"\${cmd//$jobvar/\$task}\"\nlog=\"\${log//$jobvar/\$task}\"\n" : "";
my $script_text = "#!/usr/bin/env bash\n"
  . "# Generated by $prog; submitted as:\n# " . join(" ", map { /^\S+$/ ? $_ : shq($_) } @sbatch) . "\n"
  . "cd " . shq($cwd) . " || exit 1\n"
  . "[ -f ./path.sh ] && . ./path.sh\n"
  . "set +eu\n"
  . "task=\${SLURM_ARRAY_TASK_ID:-$jobstart}\n"
  . "cmd=" . shq($cmd) . "\n"
  . "log=" . shq($logfile) . "\n"
  . $subst
  . "done_file=" . shq("$qdir/done.$id.") . "\"\$task\"\n"
  . "mkdir -p \"\$(dirname \"\$log\")\"\n"
  . "{ echo \"# \$cmd\"; echo \"# Started at \$(date)\"; "
  . "echo \"# Running on \$(hostname) as slurm job \${SLURM_ARRAY_JOB_ID:-\${SLURM_JOB_ID:-?}}_\$task\"; } > \"\$log\"\n"
  . "t0=\$(date +%s)\n"
  . "bash -c \"\$cmd\" >> \"\$log\" 2>&1 < /dev/null\n"
  . "code=\$?\n"
  . "t1=\$(date +%s)\n"
  . "echo \"# Accounting: time=\$((t1 - t0)) threads=$num_threads\" >> \"\$log\"\n"
  . "echo \"# Ended (code \$code) at \$(date)\" >> \"\$log\"\n"
  . "echo \"\$code\" > \"\$done_file.tmp\" && mv \"\$done_file.tmp\" \"\$done_file\"\n"
  . "exit \$code\n";
{
  open(my $sfh, ">", $script) or fail("cannot write $script: $!");
  print $sfh $script_text;
  close($sfh);
  chmod(0755, $script);
}

# ---- submit
my $out = "";
{
  my $pid = open(my $fh, "-|");
  fail("fork failed: $!") unless defined $pid;
  if ($pid == 0) {
    open(STDERR, ">&", \*STDOUT);
    open(STDIN, "<", "/dev/null");
    exec(@sbatch) or do { print "cannot run $sbatch[0]: $!\n"; POSIX::_exit(127); };
  }
  local $/;
  $out = <$fh> // "";
  close($fh);
  if ($? != 0 || $out !~ /(\d+)/) {
    fail("submitting the job failed (exit status " . ($? >> 8) . "): " . join(" ", @sbatch) . "\n$out");
  }
}
$out =~ /(\d+)/;
my $slurm_id = $1;

my $cancel = sub {
  print STDERR "$prog: interrupted; cancelling slurm job $slurm_id\n";
  system("scancel", $slurm_id);
  exit 1;
};
local $SIG{INT} = $cancel;
local $SIG{TERM} = $cancel;

# ---- wait
sub env_num {
  my ($name, $def) = @_;
  my $v = $ENV{$name};
  return (defined $v && $v =~ /^\d+(\.\d+)?$/) ? $v : $def;
}
my $poll_max = env_num("SLURM_PL_POLL_MAX", 10);
my $sq_interval = env_num("SLURM_PL_SQUEUE_INTERVAL", 60);
my $grace = env_num("SLURM_PL_GRACE", 120);

sub now { return Time::HiRes::time(); }

my %code;
my %pending = map { $_ => 1 } ($jobstart .. $jobend);
my $poll = 0.05;
my $last_sq = now();
my $gone_since;
my $warned_sq = 0;
while (%pending) {
  foreach my $t (sort { $a <=> $b } keys %pending) {
    my $f = "$qdir/done.$id.$t";
    next unless -f $f;
    open(my $fh, "<", $f) or next;
    my $c = <$fh>;
    close($fh);
    next unless defined $c && $c =~ /^\s*(\d+)\s*$/;
    $code{$t} = $1;
    delete $pending{$t};
  }
  last unless %pending;
  if (now() - $last_sq >= $sq_interval) {
    $last_sq = now();
    my $sq_out = `squeue --noheader --jobs=$slurm_id --format=%i 2>&1`;
    my $sq_rc = $? >> 8;
    my $alive;
    if ($sq_rc == 0) {
      $alive = ($sq_out =~ /\S/) ? 1 : 0;
    } elsif ($sq_out =~ /invalid job id/i) {
      $alive = 0;
    } else {
      print STDERR "$prog: warning: squeue failed (assuming job $slurm_id is alive): $sq_out"
        unless $warned_sq++;
      $alive = 1;
    }
    if ($alive) {
      undef $gone_since;
    } elsif (!defined $gone_since) {
      $gone_since = now();
    }
  }
  if (defined $gone_since && now() - $gone_since >= $grace) {
    foreach my $t (sort { $a <=> $b } keys %pending) {
      print STDERR "$prog: task $t of slurm job $slurm_id left the queue without finishing "
        . "(killed? see $qdir/$base-$t.out)\n";
      $code{$t} = undef;
    }
    %pending = ();
    last;
  }
  Time::HiRes::sleep($poll);
  $poll *= 1.5;
  $poll = $poll_max if $poll > $poll_max;
}

for my $t ($jobstart .. $jobend) { unlink("$qdir/done.$id.$t"); }
my $failed = grep { !defined $code{$_} || $code{$_} != 0 } ($jobstart .. $jobend);
if ($failed) {
  print STDERR "$prog: $failed / $njobs failed, log is in $logfile\n";
  exit 1;
}
exit 0;
