#!/usr/bin/env perl
# utt2spk_to_spk2utt.pl: invert "<utt> <spk>" lines into "<spk> <utt1> <utt2> ..." lines.
use strict;
use warnings;

if (@ARGV > 1 || (@ARGV && $ARGV[0] =~ /^-./)) {
  print STDERR "Usage: utt2spk_to_spk2utt.pl [<utt2spk>] > <spk2utt>\n"
    . "Speakers are printed in order of first appearance, utterances in input order.\n";
  exit 1;
}
my $name = @ARGV ? $ARGV[0] : "stdin";
my (@order, %utts);
while (my $l = <>) {
  my @f = split(' ', $l);
  next unless @f;
  die "utt2spk_to_spk2utt.pl: $name:$.: expected '<utt> <spk>', got: $l" unless @f == 2;
  my ($u, $s) = @f;
  push @order, $s unless exists $utts{$s};
  push @{$utts{$s}}, $u;
}
print join(" ", $_, @{$utts{$_}}), "\n" for @order;
exit 0;
