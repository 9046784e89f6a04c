#!/usr/bin/env perl
# filter_scp.pl: keep (or drop) the lines of a file whose field N is in an id list.
use strict;
use warnings;

my $usage = <<'END';
Usage: filter_scp.pl [--exclude] [-f <N>] <id-list> [<in.scp>|-] > <out.scp>
Prints the lines of <in.scp> (stdin if absent or "-") whose field N (default 1, fields
split on whitespace) is in the first column of <id-list>; --exclude prints the others.
Input order is kept.
END

my $exclude = 0;
my $field = 1;
while (@ARGV && $ARGV[0] =~ /^-./) {
  my $o = shift @ARGV;
  if ($o eq "--exclude") { $exclude = 1; }
  elsif ($o eq "-f" && @ARGV) {
    $field = shift @ARGV;
    die "filter_scp.pl: -f needs a positive integer, got '$field'\n" unless $field =~ /^[1-9]\d*$/;
  } elsif ($o =~ /^-f([1-9]\d*)$/) { $field = $1; }
  else { print STDERR "filter_scp.pl: unknown option $o\n$usage"; exit 1; }
}
if (@ARGV < 1 || @ARGV > 2) { print STDERR $usage; exit 1; }
my ($idlist, $in) = @ARGV;

my %ids;
open(my $lfh, "<", $idlist) or die "filter_scp.pl: cannot open $idlist: $!\n";
while (<$lfh>) {
  my @f = split(' ', $_);
  $ids{$f[0]} = 1 if @f;
}
close($lfh);

my $ifh;
if (!defined $in || $in eq "-") { $ifh = \*STDIN; }
else { open($ifh, "<", $in) or die "filter_scp.pl: cannot open $in: $!\n"; }
while (my $l = <$ifh>) {
  my @f = split(' ', $l);
  my $hit = (@f >= $field && $ids{$f[$field - 1]}) ? 1 : 0;
  print $l if $hit != $exclude;
}
exit 0;
