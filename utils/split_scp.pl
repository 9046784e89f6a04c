#!/usr/bin/env perl
# split_scp.pl: split a (key-first) list into N near-equal contiguous shards.
use strict;
use warnings;

my $usage = <<'END';
Usage: split_scp.pl [--utt2spk=<utt2spk>] <in.scp> <out.1> ... <out.N>
Splits the lines of <in.scp> into N contiguous shards whose sizes differ by at most one line.
With --utt2spk (also "--utt2spk <file>"), the lines of one speaker (for captionlib: the
captions of one clip) always go to the same shard, and the shards are balanced by line
count; each key of <in.scp> must be in <utt2spk> and a speaker's lines must be contiguous.
It is an error to ask for more shards than lines (or speakers).
END

my $utt2spk;
while (@ARGV && $ARGV[0] =~ /^--/) {
  my $o = shift @ARGV;
  if ($o =~ /^--utt2spk=(.+)$/) { $utt2spk = $1; }
  elsif ($o eq "--utt2spk" && @ARGV) { $utt2spk = shift @ARGV; }
  elsif ($o eq "--help") { print STDERR $usage; exit 1; }
  else { print STDERR "split_scp.pl: unknown option $o\n$usage"; exit 1; }
}
if (@ARGV < 2) { print STDERR $usage; exit 1; }
my ($in, @outs) = @ARGV;
my $n = scalar(@outs);

my $ifh;
if ($in eq "-") { $ifh = \*STDIN; }
else { open($ifh, "<", $in) or die "split_scp.pl: cannot open $in: $!\n"; }
my @lines = <$ifh>;
close($ifh) unless $in eq "-";
chomp(@lines);

# groups: list of [start, count]
my @groups;
if (defined $utt2spk) {
  my %u2s;
  open(my $ufh, "<", $utt2spk) or die "split_scp.pl: cannot open $utt2spk: $!\n";
  while (my $l = <$ufh>) {
    my @f = split(/\s+/, $l);
    shift @f if @f && $f[0] eq "";
    next unless @f;
    die "split_scp.pl: $utt2spk:$.: expected '<utt> <spk>', got: $l" unless @f == 2;
    $u2s{$f[0]} = $f[1];
  }
  close($ufh);
  my %seen;
  my $prev;
  for my $i (0 .. $#lines) {
    my ($key) = split(/\s+/, $lines[$i]);
    die "split_scp.pl: $in:" . ($i + 1) . ": empty line\n" unless defined $key && $key ne "";
    my $spk = $u2s{$key};
    die "split_scp.pl: $in:" . ($i + 1) . ": key '$key' is not in $utt2spk\n" unless defined $spk;
    if (defined $prev && $spk eq $prev) {
      $groups[-1][1]++;
    } else {
      die "split_scp.pl: $in:" . ($i + 1) . ": lines of speaker '$spk' are not contiguous (sort the file)\n"
        if $seen{$spk}++;
      push @groups, [$i, 1];
    }
    $prev = $spk;
  }
  if (@groups < $n) {
    die "split_scp.pl: cannot split " . scalar(@groups) . " speakers into $n shards\n";
  }
} else {
  if (@lines < $n) {
    die "split_scp.pl: cannot split " . scalar(@lines) . " lines into $n shards\n";
  }
  # near-equal: the first (L mod N) shards get one line more
  my $L = scalar(@lines);
  my $start = 0;
  for my $k (0 .. $n - 1) {
    my $size = int($L / $n) + ($k < $L % $n ? 1 : 0);
    push @groups, [$start, $size];
    $start += $size;
  }
}

# Assign contiguous runs of groups to shards, cutting near the ideal boundaries k*L/N.
my $L = scalar(@lines);
my @assign;    # shard index -> [first group, last group]
my $g = 0;
my $done = 0;
my $G = scalar(@groups);
for my $k (0 .. $n - 1) {
  my $first = $g;
  my $target = ($k + 1) * $L / $n;
  $done += $groups[$g][1];
  $g++;
  while ($g < $G && ($G - $g) > ($n - 1 - $k)) {
    my $with = $done + $groups[$g][1];
    last if abs($with - $target) >= abs($done - $target) && $k < $n - 1;
    $done = $with;
    $g++;
  }
  if ($k == $n - 1) { $done += $groups[$_][1] for $g .. $G - 1; $g = $G; }
  push @assign, [$first, $g - 1];
}

for my $k (0 .. $n - 1) {
  open(my $ofh, ">", $outs[$k]) or die "split_scp.pl: cannot write $outs[$k]: $!\n";
  my ($a, $b) = @{$assign[$k]};
  for my $gi ($a .. $b) {
    my ($s, $c) = @{$groups[$gi]};
    print $ofh "$lines[$_]\n" for $s .. $s + $c - 1;
  }
  close($ofh) or die "split_scp.pl: error writing $outs[$k]: $!\n";
}
exit 0;
