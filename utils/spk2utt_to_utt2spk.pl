#!/usr/bin/env perl
# spk2utt_to_utt2spk.pl: expand "<spk> <utt1> <utt2> ..." lines into "<utt> <spk>" lines.
use strict;
use warnings;

if (@ARGV > 1 || (@ARGV && $ARGV[0] =~ /^-./)) {
  print STDERR "Usage: spk2utt_to_utt2spk.pl [<spk2utt>] > <utt2spk>\n"
    . "Lines are printed in input order (sort with LC_ALL=C if needed).\n";
  exit 1;
}
my $name = @ARGV ? $ARGV[0] : "stdin";
while (my $l = <>) {
  my @f = split(' ', $l);
  next unless @f;
  die "spk2utt_to_utt2spk.pl: $name:$.: speaker '$f[0]' has no utterances\n" unless @f >= 2;
  my $s = shift @f;
  print "$_ $s\n" for @f;
}
exit 0;
