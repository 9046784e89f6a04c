#!/usr/bin/env bash
# fix_data_dir.sh: make a captionlib data (or dump) directory consistent, in place.
set -euo pipefail

# The files filtered, by key; passed to the perl below.
clip_files="wav.scp image.scp video.scp clip2id feats.scp reco2dur aud2name utt2num_frames"
cap_files="text utt2spk segments"
usage() {
  cat 1>&2 << EOF
Usage: fix_data_dir.sh <data-dir>
Keeps only the clips and captions present consistently in all the files that exist:
  clip-keyed:    ${clip_files}
  caption-keyed: ${cap_files}   (utt2spk maps caption-id -> clip-id)
A caption is dropped when its clip is gone; a clip is dropped when it has no caption
(only when utt2spk exists). Lines repeated verbatim are merged; a key repeated with
different values is an error. Files are re-sorted with LC_ALL=C and spk2utt is regenerated.
The original files are saved in <data-dir>/.backup/ first.
EOF
  exit 1
}

case "${1:-}" in -h | --help | "") usage ;; esac
[ $# -eq 1 ] || usage
dir=${1%/}
if [ ! -d "${dir}" ]; then
  echo "fix_data_dir.sh: no such directory ${dir}" 1>&2
  exit 1
fi

LC_ALL=C perl - "${dir}" "${clip_files}" "${cap_files}" << 'PERL'
use strict;
use warnings;
use File::Copy qw(copy);
my ($dir, $clip_files, $cap_files) = @ARGV;
sub fail { print STDERR "fix_data_dir.sh: $dir: $_[0]\n"; exit 1; }

my @clip_files = split(' ', $clip_files);
my @cap_files = split(' ', $cap_files);

# Reads a key-first file into {key => full line}.
sub read_kv {
  my ($name) = @_;
  open(my $fh, "<", "$dir/$name") or fail("cannot read $name: $!");
  my %line;
  while (my $l = <$fh>) {
    $l =~ s/\r?\n$//;
    next if $l =~ /^\s*$/;
    $l =~ /^\s*(\S+)/;
    my $k = $1;
    if (exists $line{$k}) {
      next if $line{$k} eq $l;
      fail("$name:$.: key '$k' appears twice with different values; fix it by hand");
    }
    $line{$k} = $l;
  }
  close($fh);
  return \%line;
}

my %data;
foreach my $name (@clip_files, @cap_files) {
  $data{$name} = read_kv($name) if -f "$dir/$name";
}
fail("has @{[grep { $data{$_} } qw(text segments)]} but no utt2spk") if ($data{text} || $data{segments}) && !$data{utt2spk};
fail("has spk2utt but no utt2spk") if -f "$dir/spk2utt" && !$data{utt2spk};
my @present_clip = grep { $data{$_} } @clip_files;
my @present_cap = grep { $data{$_} } @cap_files;
fail("none of @clip_files @cap_files found") unless @present_clip || @present_cap;

# clip of each caption
my %clip_of;
if ($data{utt2spk}) {
  foreach my $u (keys %{$data{utt2spk}}) {
    my @f = split(' ', $data{utt2spk}{$u});
    fail("utt2spk: bad line '$data{utt2spk}{$u}' (expected '<caption-id> <clip-id>')") unless @f == 2;
    $clip_of{$u} = $f[1];
  }
}

# all clips/captions seen anywhere (for the report)
my (%all_clips, %all_caps);
foreach my $n (@present_clip) { $all_clips{$_} = 1 for keys %{$data{$n}}; }
foreach my $n (@present_cap) { $all_caps{$_} = 1 for keys %{$data{$n}}; }
$all_clips{$_} = 1 for values %clip_of;

# intersect clip-keyed files
my %clips;
if (@present_clip) {
  %clips = %{$data{$present_clip[0]}};
  foreach my $n (@present_clip[1 .. $#present_clip]) {
    foreach my $c (keys %clips) { delete $clips{$c} unless exists $data{$n}{$c}; }
  }
} else {
  %clips = map { $_ => 1 } values %clip_of;
}
# intersect caption-keyed files, keep captions whose clip survives
my %caps;
if (@present_cap) {
  %caps = %{$data{$present_cap[0]}};
  foreach my $n (@present_cap[1 .. $#present_cap]) {
    foreach my $u (keys %caps) { delete $caps{$u} unless exists $data{$n}{$u}; }
  }
  foreach my $u (keys %caps) {
    delete $caps{$u} unless exists $clip_of{$u} && exists $clips{$clip_of{$u}};
  }
  if ($data{segments}) {
    foreach my $u (keys %caps) {
      my @f = split(' ', $data{segments}{$u});
      delete $caps{$u} unless @f >= 2 && $f[1] eq $clip_of{$u};
    }
  }
  # drop clips without any caption
  my %has_cap = map { $clip_of{$_} => 1 } keys %caps;
  foreach my $c (keys %clips) { delete $clips{$c} unless $has_cap{$c}; }
}

# write: back up the originals, then replace
mkdir("$dir/.backup") unless -d "$dir/.backup";
sub by_key { my ($ka) = $a =~ /^\s*(\S+)/; my ($kb) = $b =~ /^\s*(\S+)/; $ka cmp $kb or $a cmp $b; }
sub write_lines {
  my ($name, $lines) = @_;
  copy("$dir/$name", "$dir/.backup/$name") or fail("cannot back up $name: $!") if -f "$dir/$name";
  my $tmp = "$dir/.$name.tmp";
  open(my $fh, ">", $tmp) or fail("cannot write $tmp: $!");
  print $fh "$_\n" for sort by_key @$lines;
  close($fh) or fail("error writing $tmp: $!");
  rename($tmp, "$dir/$name") or fail("cannot replace $name: $!");
}
foreach my $n (@present_clip) {
  write_lines($n, [map { $data{$n}{$_} } grep { exists $clips{$_} } keys %{$data{$n}}]);
}
foreach my $n (@present_cap) {
  write_lines($n, [map { $data{$n}{$_} } grep { exists $caps{$_} } keys %{$data{$n}}]);
}
if ($data{utt2spk}) {
  my %utts;
  foreach my $u (sort keys %caps) { push @{$utts{$clip_of{$u}}}, $u; }
  write_lines("spk2utt", [map { join(" ", $_, @{$utts{$_}}) } keys %utts]);
}

my $nc = scalar(keys %clips);
my $nu = scalar(keys %caps);
my $rc = scalar(keys %all_clips) - $nc;
my $ru = scalar(keys %all_caps) - $nu;
my $msg = "fix_data_dir.sh: $dir: kept $nc clips";
$msg .= " and $nu captions" if @present_cap;
$msg .= "; removed $rc clips";
$msg .= " and $ru captions" if @present_cap;
print STDERR "$msg (originals in $dir/.backup)\n";
exit 0;
PERL
